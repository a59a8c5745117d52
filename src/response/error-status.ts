import { status as GrpcStatus } from '@grpc/grpc-js';
import type { Logger } from 'pino';
import { InvalidRequestError, NoConfigError, StoreUnavailableError } from '../errors.js';

export interface StatusError {
  code: GrpcStatus;
  details: string;
}

/** The one place where errors become a status, for gRPC and HTTP alike, decided by the error's class and
 * never by its text. A client's mistake is INVALID_ARGUMENT with its message (written not to hold a request
 * value); a store failure, or no config yet, is UNAVAILABLE so Envoy's failure_mode_deny decides; anything else is INTERNAL with a
 * generic message, since an unexpected error's text may hold anything, the request's own text included. It
 * is logged in full instead. `during` names what failed, for that log line. */
export function toStatus(err: unknown, logger: Pick<Logger, 'error'>, during = 'deciding'): StatusError {
  const code = statusCodeOf(err);
  if (code !== GrpcStatus.INTERNAL) return { code, details: (err as Error).message };
  logger.error({ err }, `unexpected error while ${during}`);
  return { code: GrpcStatus.INTERNAL, details: 'internal error' };
}

/** The status an error is answered with, from its class alone. */
export function statusCodeOf(err: unknown): GrpcStatus {
  if (err instanceof InvalidRequestError) return GrpcStatus.INVALID_ARGUMENT;
  if (err instanceof StoreUnavailableError || err instanceof NoConfigError) return GrpcStatus.UNAVAILABLE;
  return GrpcStatus.INTERNAL;
}

/** HTTP equivalents, for the HTTP endpoints and the admin API. */
export function httpStatusOf(code: GrpcStatus): number {
  if (code === GrpcStatus.INVALID_ARGUMENT) return 400;
  if (code === GrpcStatus.UNAVAILABLE) return 503;
  return 500;
}
