/** Errors that cross folder boundaries. Each has a stable `code`; src/response/error-status.ts is the one place
 * that turns them into gRPC status. Messages never contain a raw descriptor value. */

export class InvalidRequestError extends Error {
  override readonly name = 'InvalidRequestError';
  readonly code = 'INVALID_REQUEST';
}

/** No config to decide by yet (the first from the xDS server has not arrived): answered UNAVAILABLE, as
 * envoyproxy/ratelimit answers an error ("no rate limit configuration loaded"), so Envoy's failure mode decides
 * and not an empty config that would admit everything. */
export class NoConfigError extends Error {
  override readonly name = 'NoConfigError';
  readonly code = 'NO_CONFIG';
  constructor() {
    super('no rate limit configuration loaded yet: waiting for the first from the xDS server');
  }
}

/** A store call that got no answer. `cause` holds what the client raised (a TimeoutError when the call ran
 * out of time); the two kinds below say what is known about why, for the metrics. */
export class StoreUnavailableError extends Error {
  override readonly name = 'StoreUnavailableError';
  readonly code = 'STORE_UNAVAILABLE';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** The store is known to be down (it stopped answering): the call was refused at once, without being tried. */
export class StoreDegradedError extends StoreUnavailableError {}

/** The call could not reach the store: no usable connection (closed, refused, reset, not writable). */
export class StoreConnectionError extends StoreUnavailableError {}

/** A Redis Cluster refused the request while it fails over or moves a slot (CLUSTERDOWN, a key no longer the
 * node's): the store is briefly away, not the request's keys at fault; the request wrote nothing. */
export class StoreMovingError extends StoreUnavailableError {
  constructor() {
    super('redis cluster is failing over or moving a slot: the request was not decided');
  }
}

/** The store answered, but refused this request's keys (Redis: a key of another type, WRONGTYPE; out of
 * memory, OOM). Only this request failed; the others of its batch were decided. `kind` is Redis's word. */
export class StoreKeyError extends StoreUnavailableError {
  constructor(readonly kind: string) {
    super(`redis refused this request's keys: ${kind}`);
  }
}

/** A problem the user can fix (a flag, a file, a port): the CLI prints its message as one line,
 * `tollgate: <message>`, and exits with its code (2: the command line itself is wrong; 1: anything else).
 * No stack trace: the message says where. Every user-facing error class extends it, so the CLI decides how
 * to exit from this one class. */
export class UserError extends Error {
  readonly exitCode: number = 1;
}

/** A server could not bind its address (port in use, no permission): the message names the address and the
 * flag and variable that set it. */
export class ListenError extends UserError {
  override readonly name = 'ListenError';
  readonly code = 'LISTEN_FAILED';
}

/** Something the user asked of the CLI that cannot be done (a missing file, a malformed argument): printed
 * as one line, `tollgate: <message>`, with this exit code (2: the command line itself is wrong). */
export class CliError extends UserError {
  override readonly name = 'CliError';
  override readonly exitCode: number;
  constructor(message: string, exitCode = 1) {
    super(message);
    this.exitCode = exitCode;
  }
}

/** "no such file or directory" for ENOENT: the words of a system error without Node's repetition of the
 * path and syscall (`ENOENT: no such file or directory, open '/x'`). */
export function systemCause(err: unknown): string {
  const e = err as NodeJS.ErrnoException;
  return /^[A-Z0-9_]+: ([^,]+)/.exec(e.message ?? '')?.[1] ?? e.code ?? String(err);
}
