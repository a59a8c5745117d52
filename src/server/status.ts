import { status as GrpcStatus } from '@grpc/grpc-js';
import type { Logger } from 'pino';
import { InvalidRequestError, StoreUnavailableError } from '../errors.js';

export interface StatusError {
  code: GrpcStatus;
  details: string;
}

/** The one place where errors become gRPC status. Store failures are UNAVAILABLE so Envoy's
 * failure_mode_deny decides; anything unexpected is INTERNAL with a generic message (logged in full). */
export function toStatus(err: unknown, logger: Pick<Logger, 'error'>): StatusError {
  if (err instanceof InvalidRequestError) return { code: GrpcStatus.INVALID_ARGUMENT, details: err.message };
  if (err instanceof StoreUnavailableError) return { code: GrpcStatus.UNAVAILABLE, details: err.message };
  logger.error({ err }, 'unexpected error while deciding');
  return { code: GrpcStatus.INTERNAL, details: 'internal error' };
}

/** HTTP equivalents for the debugging endpoint. */
export function httpStatusOf(code: GrpcStatus): number {
  if (code === GrpcStatus.INVALID_ARGUMENT) return 400;
  if (code === GrpcStatus.UNAVAILABLE) return 503;
  return 500;
}
