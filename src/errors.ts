/** Errors that cross folder boundaries. Each has a stable `code`; src/server/status.ts is the one place
 * that turns them into gRPC status. Messages never contain a raw descriptor value. */

export class InvalidRequestError extends Error {
  override readonly name = 'InvalidRequestError';
  readonly code = 'INVALID_REQUEST';
}

export class StoreUnavailableError extends Error {
  override readonly name = 'StoreUnavailableError';
  readonly code = 'STORE_UNAVAILABLE';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}
