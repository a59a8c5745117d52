import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { fileURLToPath } from 'node:url';

/** proto/ sits beside src/ and dist/, so the same relative path works from both. */
export const PROTO_DIR = fileURLToPath(new URL('../../proto', import.meta.url));

export const RLS_SERVICE = 'envoy.service.ratelimit.v3.RateLimitService';
export const HEALTH_SERVICE = 'grpc.health.v1.Health';

/** keepCase: the .proto's snake_case names are used in code; numbers (not strings) for enums and longs are
 * cheaper on the hot path; defaults: absent fields read as their zero values. */
export const LOADER_OPTIONS: protoLoader.Options = {
  keepCase: true,
  longs: Number,
  defaults: true,
  oneofs: true,
  includeDirs: [PROTO_DIR],
};

let cached: protoLoader.PackageDefinition | undefined;

export function packageDefinition(): protoLoader.PackageDefinition {
  cached ??= protoLoader.loadSync(['envoy/service/ratelimit/v3/rls.proto', 'grpc/health/v1/health.proto'], LOADER_OPTIONS);
  return cached;
}

export function serviceDefinition(name: typeof RLS_SERVICE | typeof HEALTH_SERVICE): grpc.ServiceDefinition {
  return clientConstructor(name).service;
}

/** A client constructor, for tests and tools. */
export function clientConstructor(name: typeof RLS_SERVICE | typeof HEALTH_SERVICE): grpc.ServiceClientConstructor {
  const root = grpc.loadPackageDefinition(packageDefinition());
  return name.split('.').reduce<unknown>((node, part) => (node as Record<string, unknown>)[part], root) as grpc.ServiceClientConstructor;
}
