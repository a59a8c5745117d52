import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import type { WireResponse } from '../response/wire.js';
import { type DecodeBounds, decodeRateLimitRequest, encodable, encodeRateLimitResponse } from '../rls/rls-codec.js';

/** proto/ sits beside src/ and dist/, so the same relative path works from both. */
const PROTO_DIR = fileURLToPath(new URL('../../proto', import.meta.url));

export const RLS_SERVICE = 'envoy.service.ratelimit.v3.RateLimitService';
export const HEALTH_SERVICE = 'grpc.health.v1.Health';
export const RLQS_SERVICE = 'envoy.service.rate_limit_quota.v3.RateLimitQuotaService';
type ServiceName = typeof RLS_SERVICE | typeof HEALTH_SERVICE | typeof RLQS_SERVICE;

/** keepCase: the .proto's snake_case names are used in code; numbers (not strings) for enums and longs are
 * cheaper on the hot path; defaults: absent fields read as their zero values. */
const LOADER_OPTIONS: protoLoader.Options = {
  keepCase: true,
  longs: Number,
  defaults: true,
  oneofs: true,
  includeDirs: [PROTO_DIR],
};

let cached: protoLoader.PackageDefinition | undefined;

function packageDefinition(): protoLoader.PackageDefinition {
  cached ??= protoLoader.loadSync(
    ['envoy/service/ratelimit/v3/rls.proto', 'grpc/health/v1/health.proto', 'envoy/service/rate_limit_quota/v3/rlqs.proto'],
    LOADER_OPTIONS,
  );
  return cached;
}

/** The definition a server registers. For the RLS service, the two messages go through the hand-written
 * codec (rls/rls-codec.ts): the request is decoded in one pass that also refuses what is not a well-formed
 * RateLimitRequest, and never throws (grpc-js answers a throwing deserializer with INTERNAL, uncounted,
 * although undecodable bytes are the client's fault): it returns an UndecodableRequest, which the handler
 * answers with INVALID_ARGUMENT. */
export function serviceDefinition(name: ServiceName, bounds?: DecodeBounds): grpc.ServiceDefinition {
  const definition = clientConstructor(name).service;
  if (name === RLQS_SERVICE) {
    // Left as bytes: a report is decoded (src/rlqs/decode.ts, never throwing: a throwing deserializer would make
    // grpc-js end the call with INTERNAL) when the stream answers it, in RLQS's share of the process
    // (src/rlqs/cpu.ts), so reports sent faster than they are answered cost neither the time to decode nor objects.
    const method = definition.StreamRateLimitQuotas!;
    return { ...definition, StreamRateLimitQuotas: { ...method, requestDeserialize: (buf: Buffer): Buffer => buf } };
  }
  if (name !== RLS_SERVICE) return definition;
  const method = definition.ShouldRateLimit!;
  const general = method.responseSerialize;
  const responseSerialize = (m: WireResponse): Buffer => (encodable(m) ? encodeRateLimitResponse(m) : general(m));
  const requestDeserialize = (buf: Buffer): ReturnType<typeof decodeRateLimitRequest> => decodeRateLimitRequest(buf, bounds);
  return { ...definition, ShouldRateLimit: { ...method, requestDeserialize, responseSerialize } };
}

/** A client constructor, for tests and tools. */
export function clientConstructor(name: ServiceName): grpc.ServiceClientConstructor {
  const root = grpc.loadPackageDefinition(packageDefinition());
  return name.split('.').reduce<unknown>((node, part) => (node as Record<string, unknown>)[part], root) as grpc.ServiceClientConstructor;
}
