import { runtimeConfigDir } from './compat.js';
import { type OptionName, SERVE_OPTIONS, type Setting } from './table.js';

/** Where a setting's text comes from: a flag, Tollgate's variable, envoyproxy/ratelimit's variable, the default. */

/** Flags win over the environment, which wins over the default. */
export function settingsReader(values: Record<string, unknown>, env: NodeJS.ProcessEnv): (name: OptionName) => Setting {
  return (name) => {
    const o = SERVE_OPTIONS[name];
    const flag = values[name] as string | undefined;
    if (flag !== undefined) return { value: flag, from: `--${name}` };
    // An empty variable is unset (as a shell's `VAR=` in a manifest usually means), so the default applies.
    const fromEnv = env[o.env];
    if (fromEnv !== undefined && fromEnv !== '') return { value: fromEnv, from: o.env };
    const compat = COMPAT_ENV[name]?.(env);
    return compat ?? { value: o.default, from: `--${name}` };
  };
}

/** Where envoyproxy/ratelimit's own variables stand in for an unset Tollgate one with the same meaning. */
const COMPAT_ENV: Partial<Record<OptionName, (env: NodeJS.ProcessEnv) => Setting | undefined>> = {
  config: (env) => {
    const dir = runtimeConfigDir(env);
    return dir === undefined ? undefined : { value: dir, from: 'RUNTIME_ROOT' };
  },
  // Set to nothing (envoyproxy/ratelimit's default, often written out in its manifests) it is unset, as every
  // variable is: Tollgate's keys keep their own namespace.
  'redis-key-prefix': (env) => (env.CACHE_KEY_PREFIX ? { value: env.CACHE_KEY_PREFIX, from: 'CACHE_KEY_PREFIX' } : undefined),
  'redis-sentinel-password': (env) => (env.REDIS_SENTINEL_AUTH ? { value: env.REDIS_SENTINEL_AUTH, from: 'REDIS_SENTINEL_AUTH' } : undefined),
  // Envoy Gateway's name for the gRPC port's client CA (envoyproxy/ratelimit reads GRPC_CLIENT_TLS_CACERT only).
  'grpc-tls-client-ca': (env) => (env.GRPC_SERVER_TLS_CA_CERT ? { value: env.GRPC_SERVER_TLS_CA_CERT, from: 'GRPC_SERVER_TLS_CA_CERT' } : undefined),
  // envoyproxy/ratelimit's BACKEND_TYPE defaults to redis (src/settings/settings.go): a deployment moved from it
  // sets its Redis variables and no backend, and must not get separate counters in every pod.
  // The standard variable chooses the transport when envoyproxy/ratelimit's does not.
  'tracing-exporter-protocol': (env) => {
    const name = ['OTEL_EXPORTER_OTLP_TRACES_PROTOCOL', 'OTEL_EXPORTER_OTLP_PROTOCOL'].find((n) => env[n]);
    return name ? { value: env[name]!, from: name } : undefined;
  },
  store: (env) => {
    const set = redisVariablesSet(env);
    return set.length === 0 ? undefined : { value: 'redis', from: set.join(', ') };
  },
};

/** envoyproxy/ratelimit's Redis variables that, set without BACKEND_TYPE, choose the Redis store. */
const REDIS_VARIABLES = ['REDIS_URL', 'REDIS_SOCKET_TYPE', 'REDIS_TYPE', 'REDIS_AUTH', 'REDIS_TLS'];

function redisVariablesSet(env: NodeJS.ProcessEnv): string[] {
  return REDIS_VARIABLES.filter((v) => env[v] !== undefined && env[v] !== '');
}

/** The Redis variables that chose the store, when neither --store nor BACKEND_TYPE did: start-up names them
 * (service.ts), never their values. */
export function storeInferredFrom(flag: unknown, env: NodeJS.ProcessEnv): string[] | undefined {
  if (flag !== undefined || env.BACKEND_TYPE) return undefined;
  const set = redisVariablesSet(env);
  return set.length > 0 ? set : undefined;
}
