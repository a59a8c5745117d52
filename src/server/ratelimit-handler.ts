import type * as grpc from '@grpc/grpc-js';
import type { Logger } from 'pino';
import type { Limiter } from '../limiter/limiter.js';
import { toWireResponse } from '../response/response.js';
import type { WireResponse } from '../response/wire.js';
import { toDecisionInput, type RequestBounds, type WireRequest } from './request.js';
import { toServiceError } from './status.js';

export interface HandlerDeps {
  limiter: Limiter;
  bounds: RequestBounds;
  logger: Logger;
}

/** The decision path shared by gRPC and the /json endpoint: validate, decide, build the response. */
export async function decideWire(deps: HandlerDeps, req: WireRequest): Promise<WireResponse> {
  const input = toDecisionInput(req, deps.bounds);
  const decision = await deps.limiter.decide(input);
  return toWireResponse(decision);
}

export function rateLimitService(deps: HandlerDeps): grpc.UntypedServiceImplementation {
  return {
    ShouldRateLimit: (call: grpc.ServerUnaryCall<WireRequest, WireResponse>, callback: grpc.sendUnaryData<WireResponse>) => {
      decideWire(deps, call.request).then(
        (response) => callback(null, response),
        (err: unknown) => callback(toServiceError(err, deps.logger)),
      );
    },
  };
}
