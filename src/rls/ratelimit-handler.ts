import { performance } from 'node:perf_hooks';
import { status as GrpcStatus, Metadata, type ServerUnaryCall, type sendUnaryData, type UntypedServiceImplementation } from '@grpc/grpc-js';
import type { Logger } from 'pino';
import { InvalidRequestError, NoConfigError } from '../errors.js';
import type { Decision, DecisionInput, Limiter } from '../limiter/limiter.js';
import { PEER_HEADER, type PeerConn, type PeerSource } from '../limiter/slot-keeper.js';
import type { Metrics, UncheckedReason } from '../metrics/metrics.js';
import type { CallInfo, DecisionObserver, ObservedCall } from '../observe/observer.js';
import { toStatus } from '../response/error-status.js';
import type { ResponseSettings } from '../response/header-policy.js';
import { dynamicMetadata } from '../response/metadata.js';
import { toWireResponse } from '../response/response.js';
import type { WireResponse } from '../response/wire.js';
import type { Maybe } from '../store/store.js';
import { type RequestBounds, toDecisionInput, type WireRequest } from './request.js';
import { UndecodableRequest } from './rls-codec.js';

export interface HandlerDeps {
  limiter: Limiter;
  bounds: RequestBounds;
  logger: Logger;
  metrics?: Metrics;
  /** RESPONSE_DYNAMIC_METADATA: answer with dynamic_metadata (response/metadata.ts). */
  dynamicMetadata?: boolean;
  /** Tracing and the decision log; unset when both are off. */
  observer?: DecisionObserver;
  /** Which headers and 429 body answers carry; Tollgate's defaults when unset. */
  responses?: ResponseSettings;
  /** Names a call's connection while a rule has max_hold (limiter/slot-keeper.ts). */
  peers?: PeerSource;
}

/** The decision path shared by gRPC and the /json endpoint: validate, decide, observe, build the response.
 * At once when the store answers at once; throws (or rejects) with what toStatus() maps to a status. */
export function decideWire(deps: HandlerDeps, req: WireRequest | UndecodableRequest, call?: CallInfo, peer?: PeerConn): Maybe<WireResponse> {
  if (!deps.observer || !call) return decide(deps, req, undefined, peer);
  const observed = deps.observer.begin(call);
  let response: Maybe<WireResponse>;
  try {
    response = decide(deps, req, observed, peer);
  } catch (err) {
    observed.failed(err);
    throw err;
  }
  if (!(response instanceof Promise)) return response;
  return response.catch((err: unknown) => {
    observed.failed(err);
    throw err;
  });
}

function decide(deps: HandlerDeps, req: WireRequest | UndecodableRequest, observed: ObservedCall | undefined, peer: PeerConn | undefined): Maybe<WireResponse> {
  const start = performance.now();
  if (req instanceof UndecodableRequest) throw new InvalidRequestError(req.overBound ? req.reason : `not a valid RateLimitRequest: ${req.reason}`);
  const input = toDecisionInput(req, deps.bounds);
  if (peer) input.peer = peer;
  const decision = deps.limiter.decide(input, observed?.link);
  if (decision instanceof Promise) return decision.then((d) => answer(deps, input, d, start, req.hits_addend, observed));
  return answer(deps, input, decision, start, req.hits_addend, observed);
}

function answer(
  deps: HandlerDeps,
  input: DecisionInput,
  decision: Decision,
  start: number,
  requestHits: number | undefined,
  observed: ObservedCall | undefined,
): WireResponse {
  deps.metrics?.observe(input.domain, decision, (performance.now() - start) / 1000);
  observed?.decided(input, decision);
  if (deps.logger.isLevelEnabled('debug')) deps.logger.debug(describe(decision), 'decision');
  const response = toWireResponse(decision, deps.responses);
  if (deps.dynamicMetadata) response.dynamic_metadata = dynamicMetadata(input, requestHits ?? 0, decision);
  return response;
}

/** A failed gRPC call's status, counted: the status comes from the one mapping (response/error-status.ts); the count
 * is of gRPC calls only (the HTTP endpoints that share decideWire count their failures apart,
 * tollgate_http_errors_total). Both gRPC servers answer through it. */
export function grpcFailure(deps: HandlerDeps, err: unknown): { code: GrpcStatus; details: string } {
  const s = toStatus(err, deps.logger);
  deps.metrics?.grpcErrors.inc({ code: GrpcStatus[s.code] });
  deps.metrics?.unchecked.inc({ reason: uncheckedReason(err, s.code) });
  return s;
}

/** An answer after the caller's deadline (grpc-timeout: Envoy's filter timeout), or after the caller gave up on the
 * call (`gone`: it reset the stream, as a client does at its own deadline, which runs from before the request
 * reached this process), is one Envoy no longer waits for: its failure mode has already decided, so the request
 * went through unchecked even though it was counted. */
export function countLate(deps: HandlerDeps, deadline: number, gone = false): void {
  // No clock read for a call without a deadline (Infinity): none is late.
  if (deps.metrics && (gone || (deadline !== Infinity && Date.now() > deadline))) deps.metrics.unchecked.inc({ reason: 'late' });
}

/** Where a gRPC call's answer goes: one object a call (methods, not two closures: the hot path allocates less). */
export interface CallSink {
  done(r: WireResponse): void;
  failed(s: { code: GrpcStatus; details: string }): void;
}

/** One gRPC call's decision, the shape both gRPC servers share (this file's grpc-js service, server/h2-rls.ts):
 * `done` with the response, at once when the store answers at once; or `failed` with the counted status. */
export function decideCall(deps: HandlerDeps, request: WireRequest | UndecodableRequest, call: CallInfo | undefined, sink: CallSink, peer?: PeerConn): void {
  let response: Maybe<WireResponse>;
  try {
    response = decideWire(deps, request, call, peer);
  } catch (err) {
    sink.failed(grpcFailure(deps, err));
    return;
  }
  if (!(response instanceof Promise)) sink.done(response);
  else
    response.then(
      (r) => sink.done(r),
      (err: unknown) => sink.failed(grpcFailure(deps, err)),
    );
}

export function rateLimitService(deps: HandlerDeps): UntypedServiceImplementation {
  type Call = ServerUnaryCall<WireRequest | UndecodableRequest, WireResponse>;
  return {
    ShouldRateLimit: (call: Call, callback: sendUnaryData<WireResponse>) =>
      decideCall(
        deps,
        call.request,
        { kind: 'grpc', headers: call.metadata },
        {
          done: (r) => {
            countLate(deps, Number(call.getDeadline()), call.cancelled);
            callback(null, r);
          },
          failed: (s) => callback({ code: s.code, details: s.details, message: s.details, metadata: new Metadata() }),
        },
        deps.peers?.active() ? deps.peers.ofGrpc(call.getPeer(), call.metadata.get(PEER_HEADER)[0]) : undefined,
      ),
  };
}

/** Every error answer leaves the request to Envoy's failure mode; the reason says which kind of error. */
function uncheckedReason(err: unknown, code: GrpcStatus): UncheckedReason {
  if (err instanceof NoConfigError) return 'no_config';
  if (code === GrpcStatus.UNAVAILABLE) return 'store_unavailable';
  if (code === GrpcStatus.INVALID_ARGUMENT) return 'invalid_request';
  return 'internal_error';
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
