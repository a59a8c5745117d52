import { status as grpcStatus } from '@grpc/grpc-js';
import { PEER_HEADER } from '../limiter/slot-keeper.js';
import type { WireResponse } from '../response/wire.js';
import { type CallSink, countLate, decideCall, type HandlerDeps } from '../rls/ratelimit-handler.js';
import { decodeRateLimitRequest, encodable, encodeRateLimitResponse, withGrpcPrefix } from '../rls/rls-codec.js';
import { serveUnary, type UnaryCall, type UnaryLimits } from './h2-unary.js';
import type { StreamHandler } from './hot-path.js';

/** RateLimitService/ShouldRateLimit on node:http2 (h2-unary.ts): the same decision path, codec, statuses and
 * counts as the grpc-js service (rls/ratelimit-handler.ts), without grpc-js's per-call work. `general` encodes a
 * response the hand-written encoder does not (protobufjs, as grpc-js's serializer does). */
export function shouldRateLimitOnH2(deps: HandlerDeps, general: (m: WireResponse) => Buffer, limits: UnaryLimits): StreamHandler {
  const onMessage = (message: Buffer, call: UnaryCall): void => {
    // What is not a request decodes to an UndecodableRequest, which decideWire refuses; a decoder that threw
    // anyway (a bug) is answered as grpc-js answers a throwing deserializer, never thrown in the stream's handler.
    let request: ReturnType<typeof decodeRateLimitRequest>;
    try {
      request = decodeRateLimitRequest(message, deps.bounds);
    } catch {
      call.fail(grpcStatus.INTERNAL, 'Error deserializing request');
      return;
    }
    // The headers as node:http2 gave them: the propagators read the trace headers from them directly
    // (tracing/propagation.ts); no grpc-js Metadata of every header is built for a call.
    const info = deps.observer && { kind: 'grpc' as const, headers: call.headers };
    const peer = deps.peers?.active() ? deps.peers.of(call.session, call.headers[PEER_HEADER]) : undefined;
    decideCall(deps, request, info, new H2Sink(deps, general, call), peer);
  };
  return (stream, headers) => serveUnary(stream, headers, limits, onMessage);
}

/** A call's answer on node:http2: the response encoded and framed, or its status. */
class H2Sink implements CallSink {
  constructor(
    private readonly deps: HandlerDeps,
    private readonly general: (m: WireResponse) => Buffer,
    private readonly call: UnaryCall,
  ) {}

  done(r: WireResponse): void {
    const call = this.call;
    countLate(this.deps, call.deadline, !call.open);
    let frame: Buffer;
    try {
      frame = encodable(r) ? encodeRateLimitResponse(r, true) : withGrpcPrefix(this.general(r));
    } catch (err) {
      // As grpc-js answers a serializer that throws; never an exception in a stream's event handler.
      this.deps.logger.error({ err: (err as Error).name }, 'a RateLimitResponse could not be encoded');
      call.fail(grpcStatus.INTERNAL, 'Error serializing response');
      return;
    }
    call.reply(frame);
  }

  failed(s: { code: grpcStatus; details: string }): void {
    this.call.fail(s.code, s.details);
  }
}
