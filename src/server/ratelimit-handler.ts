import { Metadata, status as GrpcStatus, type sendUnaryData, type ServerUnaryCall, type UntypedServiceImplementation } from '@grpc/grpc-js';
import { performance } from 'node:perf_hooks';
import type { Logger } from 'pino';
import type { Decision, Limiter } from '../limiter/limiter.js';
import type { Metrics } from '../metrics/metrics.js';
import { toWireResponse } from '../response/response.js';
import type { WireResponse } from '../response/wire.js';
import { InvalidRequestError } from '../errors.js';
import { UndecodableRequest } from './rls-codec.js';
import { toDecisionInput, type RequestBounds, type WireRequest } from './request.js';
import { toStatus, type StatusError } from './status.js';

export interface HandlerDeps {
  limiter: Limiter;
  bounds: RequestBounds;
  logger: Logger;
  metrics?: Metrics;
}

/** The decision path shared by gRPC and the /json endpoint: validate, decide, observe, build the response. */
export async function decideWire(deps: HandlerDeps, req: WireRequest | UndecodableRequest): Promise<WireResponse> {
  const start = performance.now();
  if (req instanceof UndecodableRequest) throw new InvalidRequestError(`not a valid RateLimitRequest: ${req.reason}`);
  const input = toDecisionInput(req, deps.bounds);
  const decision = await deps.limiter.decide(input);
  deps.metrics?.observe(input.domain, decision, (performance.now() - start) / 1000);
  if (deps.logger.isLevelEnabled('debug')) deps.logger.debug(describe(decision), 'decision');
  return toWireResponse(decision);
}

/** Turns a failure into its status (the mapping lives in status.ts) and counts it. */
export function failure(deps: HandlerDeps, err: unknown): StatusError {
  const s = toStatus(err, deps.logger);
  deps.metrics?.grpcErrors.inc({ code: GrpcStatus[s.code] });
  return s;
}

export function rateLimitService(deps: HandlerDeps): UntypedServiceImplementation {
  return {
    ShouldRateLimit: (call: ServerUnaryCall<WireRequest | UndecodableRequest, WireResponse>, callback: sendUnaryData<WireResponse>) => {
      decideWire(deps, call.request).then(
        (response) => callback(null, response),
        (err: unknown) => {
          const s = failure(deps, err);
          callback({ code: s.code, details: s.details, message: s.details, metadata: new Metadata() });
        },
      );
    },
  };
}

/** A debug line per decision: rules and verdicts only, never descriptor values; the domain only when it is
 * a configured one (an unknown domain is whatever the client sent). */
function describe(d: Decision): Record<string, unknown> {
  return {
    domain: d.domain?.name ?? '(unknown)',
    overLimit: d.overLimit,
    source: d.source,
    descriptors: d.descriptors.map((o) => ({ rule: o.rule?.id ?? null, over: o.over, shadow: o.shadow, tier: o.tier })),
  };
}
