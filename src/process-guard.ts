import type { Logger } from 'pino';
import { fingerprint } from './fingerprint.js';

/** What a log line may say of an error nobody handled: its kind, where it was thrown (code, not data), and its
 * message only as a length and a fingerprint. The message is unknown text (a library's, perhaps quoting a
 * request's descriptor value), and request strings reach logs only so. Never throws: whatever was thrown (a
 * revoked Proxy, getters that throw, a message that is not a string) reads as 'unreadable' at worst. */
export function describeUnknown(reason: unknown): Record<string, unknown> {
  try {
    if (!(reason instanceof Error)) return { kind: typeof reason };
    const message = reason.message;
    if (typeof message !== 'string') return { kind: 'unreadable' };
    return {
      kind: String(reason.constructor.name),
      messageLength: message.length,
      messageFingerprint: fingerprint(message),
      at: firstFrame(reason.stack, message),
    };
  } catch {
    return { kind: 'unreadable' };
  }
}

/** The first frame of a V8 stack: after the message where the stack's first line holds it (the message may hold
 * lines that look like frames), after that line when the message is empty; a stack that holds neither (a
 * message changed after the error was made, a stack made some other way) is not read at all. */
function firstFrame(stack: unknown, message: string): string | undefined {
  if (typeof stack !== 'string') return undefined;
  const firstLineEnd = stack.indexOf('\n');
  let rest: string;
  if (message === '') rest = firstLineEnd < 0 ? '' : stack.slice(firstLineEnd);
  else {
    const at = stack.indexOf(message);
    if (at < 0 || (firstLineEnd >= 0 && at > firstLineEnd)) return undefined;
    rest = stack.slice(at + message.length);
  }
  return rest
    .split('\n')
    .find((l) => l.trimStart().startsWith('at '))
    ?.trim();
}

/** A promise rejected with no handler is a bug in Tollgate or a library, never a verdict on a request: Node's
 * default (since 15) ends the process with it, which would take the rate limiting of a whole pod, and every
 * call in flight, down with one stray promise. Logged once each, counted (`on.unhandled`), and the service goes
 * on. An exception nothing caught still ends the process, as Node's default does (what it left half done is
 * unknown), but through one log line like this one and exit code 1 (`on.exit`, once), not a stack on stderr
 * that quotes its message. */
export function guardProcess(logger: Logger, on: { unhandled: () => void; exit: (code: number) => void }, target: NodeJS.EventEmitter = process): void {
  target.on('unhandledRejection', (reason: unknown) => {
    on.unhandled();
    logger.error(describeUnknown(reason), 'unhandled promise rejection (a bug): the service goes on');
  });
  let exiting = false;
  target.on('uncaughtException', (err: unknown) => {
    if (exiting) return; // more of the same while the log line leaves: the first one said it
    exiting = true;
    logger.fatal(describeUnknown(err), 'uncaught exception (a bug): exiting');
    on.exit(1);
  });
}
