import type { Logger } from 'pino';
import { fingerprint } from './fingerprint.js';

/** What a log line may say of an error nobody handled: its kind, where it was thrown (code, not data), and its
 * message only as a length and a fingerprint. The message is unknown text (a library's, perhaps quoting a
 * request's descriptor value), and request strings reach logs only so. */
export function describeUnknown(reason: unknown): Record<string, unknown> {
  if (!(reason instanceof Error)) return { kind: typeof reason };
  // The frames come after V8's "<name>: <message>" (which may hold lines that look like frames); a stack made
  // some other way is not read at all.
  const head = reason.message ? `${reason.name}: ${reason.message}` : reason.name;
  const stack = reason.stack?.startsWith(head) ? reason.stack.slice(head.length) : '';
  const frame = stack
    .split('\n')
    .find((l) => l.trimStart().startsWith('at '))
    ?.trim();
  return { kind: reason.constructor.name, messageLength: reason.message.length, messageFingerprint: fingerprint(reason.message), at: frame };
}

/** A promise rejected with no handler is a bug in Tollgate or a library, never a verdict on a request: Node's
 * default (since 15) ends the process with it, which would take the rate limiting of a whole pod, and every
 * call in flight, down with one stray promise. Logged once each, counted (`onUnhandled`), and the service goes
 * on. An exception nothing caught still ends the process, as Node's default does (what it left half done is
 * unknown), but through one log line like this one and exit code 1, not a stack on stderr that quotes its
 * message. */
export function guardProcess(logger: Logger, on: { unhandled: () => void; exit: (code: number) => void }, target: NodeJS.EventEmitter = process): void {
  target.on('unhandledRejection', (reason: unknown) => {
    on.unhandled();
    logger.error(describeUnknown(reason), 'unhandled promise rejection (a bug): the service goes on');
  });
  target.on('uncaughtException', (err: unknown) => {
    logger.fatal(describeUnknown(err), 'uncaught exception (a bug): exiting');
    on.exit(1);
  });
}
