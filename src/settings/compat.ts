import { join } from 'node:path';
import { UserError } from '../errors.js';

/** envoyproxy/ratelimit's settings (the `envconfig` names of its src/settings/settings.go), for users moving
 * from it. Each is either read with the same meaning (the table of settings, table.ts's SERVE_OPTIONS, under
 * its name, or READ_BY_COMPAT below) or listed in UNSUPPORTED, so that a deployment that sets it hears once,
 * at start, that it does nothing instead of finding out in production. None is ignored silently:
 * test/unit/settings-compat-complete.test.ts holds every name of settings.go to that. */

/** Thrown for a value that cannot be used; the message names the flag or variable it came from. */
export class SettingsError extends UserError {
  override readonly name = 'SettingsError';
  override readonly exitCode = 2;
}

interface Unsupported {
  name: string;
  /** Values under which Tollgate already behaves as asked (USE_STATSD=false): no warning for those. */
  same?: RegExp;
}

const FALSE = /^(false|0|no)$/i;
const TRUE = /^(true|1|yes)$/i;

/** envoyproxy/ratelimit's variables read besides table.ts's SERVE_OPTIONS (where HOST, PORT, GRPC_HOST, GRPC_PORT,
 * LOG_LEVEL, LOG_FORMAT, BACKEND_TYPE, REDIS_URL, REDIS_TYPE, NEAR_LIMIT_RATIO, SHADOW_MODE, QUOTA_MODE,
 * STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, RESPONSE_DYNAMIC_METADATA and MERGE_DOMAIN_CONFIG are read under their own names): the config directory
 * (runtimeConfigDir), the Redis URL's parts (redisUrlFrom), and stand-ins for Tollgate's own settings
 * (reader.ts, COMPAT_ENV). */
export const READ_BY_COMPAT: readonly string[] = [
  'RUNTIME_ROOT',
  'RUNTIME_SUBDIRECTORY',
  'RUNTIME_APPDIRECTORY',
  'REDIS_AUTH',
  'REDIS_TLS',
  'REDIS_SOCKET_TYPE',
  'CACHE_KEY_PREFIX',
  'REDIS_SENTINEL_AUTH',
];

/** The variables Tollgate does not act on; `NAME_*` stands for every variable of that prefix. */
const UNSUPPORTED: readonly Unsupported[] = [
  { name: 'USE_STATSD', same: FALSE },
  { name: 'USE_DOG_STATSD', same: FALSE },
  { name: 'USE_DOG_STATSD_MOGRIFIERS' },
  // Not in settings.go: each mogrifier USE_DOG_STATSD_MOGRIFIERS names is read from DOG_STATSD_MOGRIFIER_<name>_*
  // (envoyproxy/ratelimit's src/godogstats/mogrifier_map.go).
  { name: 'DOG_STATSD_MOGRIFIER_*' },
  { name: 'STATSD_HOST' },
  { name: 'STATSD_PORT' },
  { name: 'EXTRA_TAGS' },
  { name: 'STATS_FLUSH_INTERVAL' },
  { name: 'DISABLE_STATS', same: FALSE },
  { name: 'PROMETHEUS_MAPPER_YAML' },
  { name: 'PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS' },
  { name: 'DEBUG_HOST' },
  { name: 'DEBUG_PORT' },
  { name: 'GRPC_UDS' },
  { name: 'GRPC_MAX_CONNECTION_AGE' },
  { name: 'GRPC_MAX_CONNECTION_AGE_GRACE' },
  { name: 'GRPC_CLIENT_TLS_SAN' },
  // What Tollgate does, whatever they say: it is ready with a config that holds no domain (service.ts); it skips
  // dot entries (config/load.ts) and re-reads the directory it was given.
  { name: 'HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED', same: FALSE },
  { name: 'RUNTIME_WATCH_ROOT', same: TRUE },
  { name: 'RUNTIME_IGNOREDOTFILES', same: TRUE },
  { name: 'EXPIRATION_JITTER_MAX_SECONDS' },
  { name: 'LOCAL_CACHE_SIZE_IN_BYTES' },
  { name: 'REDIS_POOL_SIZE' },
  { name: 'REDIS_POOL_ON_EMPTY_BEHAVIOR' },
  { name: 'REDIS_CLUSTER_PIPELINE_PARALLELISM' },
  { name: 'REDIS_TIMEOUT' },
  { name: 'REDIS_STARTUP_*' },
  { name: 'REDIS_HEALTH_CHECK_ACTIVE_CONNECTION', same: FALSE },
  { name: 'REDIS_PERSECOND', same: FALSE },
  { name: 'REDIS_PERSECOND_*' },
  { name: 'MEMCACHE_*' },
  // TRACING_* are read (sections.ts); the OTEL_* variables by the OTLP exporter itself.
];

/** A few words beside a name in the start-up warning, where Tollgate has a setting of its own for the same. */
export const SETTING_HINTS: Readonly<Record<string, string>> = {
  LOCAL_CACHE_SIZE_IN_BYTES: "LOCAL_CACHE=false turns Tollgate's over-limit cache off, as 0 does there",
  PROMETHEUS_MAPPER_YAML: "the metrics keep Tollgate's names",
};

/** envoyproxy/ratelimit's config directory variables: with CONFIG_TYPE=GRPC_XDS_SOTW neither reads a directory. */
const DIRECTORY_VARIABLES = ['RUNTIME_ROOT', 'RUNTIME_SUBDIRECTORY', 'RUNTIME_APPDIRECTORY', 'RUNTIME_WATCH_ROOT', 'RUNTIME_IGNOREDOTFILES'];

/** The envoyproxy/ratelimit variables set in `env` that Tollgate does not act on, by name (never value):
 * `unsupported`, which would change something there (ignored here), and `unneeded`, set to what Tollgate does anyway or, under
 * xDS, the config directory's, which configure nothing there either. A variable set to nothing is unset, as
 * everywhere in Tollgate's settings (a manifest's `NAME: ""`). */
export function settingNotes(env: NodeJS.ProcessEnv, xds: boolean): { unsupported: string[]; unneeded: string[] } {
  const ignored = new Set<string>();
  const unneeded = new Set<string>();
  for (const [name, value] of Object.entries(env)) {
    if (value === undefined || value === '') continue;
    if (xds && DIRECTORY_VARIABLES.includes(name)) {
      unneeded.add(name);
      continue;
    }
    const entry = UNSUPPORTED.find((u) => u.name === name) ?? UNSUPPORTED.find((u) => u.name.endsWith('*') && name.startsWith(u.name.slice(0, -1)));
    if (entry && entry.name === name && entry.same?.test(value)) unneeded.add(name);
    else if (entry) ignored.add(name);
  }
  return { unsupported: [...ignored].sort(), unneeded: [...unneeded].sort() };
}

/** envoyproxy/ratelimit's config location, $RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/$RUNTIME_APPDIRECTORY
 * (the last "config" by default), when RUNTIME_ROOT is set. */
export function runtimeConfigDir(env: NodeJS.ProcessEnv): string | undefined {
  const root = env.RUNTIME_ROOT;
  if (!root) return undefined;
  return join(root, env.RUNTIME_SUBDIRECTORY ?? '', env.RUNTIME_APPDIRECTORY ?? 'config');
}

export function parseBool(text: string, from: string): boolean {
  if (TRUE.test(text)) return true;
  if (FALSE.test(text) || text === '') return false;
  throw new SettingsError(`${from} must be true or false (got "${text}")`);
}

/** A Redis URL in Tollgate's form from what was set: Tollgate's own URL, or envoyproxy/ratelimit's
 * REDIS_URL (`host:port`, `host:port,host:port` for a cluster, `master,sentinel:port,…` for sentinel) with
 * REDIS_AUTH (`password` or `user:password`) and REDIS_TLS. Errors never repeat the URL or the password. */
export function redisUrlFrom(url: { value: string; from: string }, type: string, env: NodeJS.ProcessEnv): string {
  const socket = env.REDIS_SOCKET_TYPE;
  if (socket !== undefined && socket.toLowerCase() !== 'tcp') {
    throw new SettingsError(`REDIS_SOCKET_TYPE must be tcp (got "${socket}"): Tollgate reaches Redis over TCP only; set REDIS_URL to host:port`);
  }
  const tls = env.REDIS_TLS === undefined ? false : parseBool(env.REDIS_TLS, 'REDIS_TLS');
  const auth = env.REDIS_AUTH ? authPart(env.REDIS_AUTH) : '';
  const full = /^(rediss?):\/\/(.*)$/i.exec(url.value.trim());
  if (full) {
    const rest = full[2]!;
    if (auth && /^[^/]*@/.test(rest)) throw new SettingsError(`REDIS_AUTH is set and ${url.from} holds credentials too: use one of them`);
    return `${tls ? 'rediss' : full[1]!.toLowerCase()}://${auth}${rest}`;
  }
  const parts = url.value
    .split(',')
    .map((p) => p.trim())
    .filter(Boolean);
  const master = type === 'sentinel' && parts.length > 1 && !parts[0]!.includes(':') ? parts.shift() : undefined;
  if (parts.length === 0 || !parts.every((p) => /^[^\s/@]+:\d+$/.test(p))) {
    throw new SettingsError(`${url.from} must be a redis[s]:// URL or host:port (comma-separated for several nodes)`);
  }
  return `${tls ? 'rediss' : 'redis'}://${auth}${parts.join(',')}${master ? `/${encodeURIComponent(master)}` : ''}`;
}

/** REDIS_AUTH as the user-info part of a URL: `password`, or `user:password` as envoyproxy/ratelimit reads it. */
function authPart(auth: string): string {
  const at = auth.indexOf(':');
  const [user, password] = at === -1 ? ['', auth] : [auth.slice(0, at), auth.slice(at + 1)];
  return `${encodeURIComponent(user)}:${encodeURIComponent(password)}@`;
}

const GO_DURATION_UNITS: Record<string, number> = { ns: 1e-6, us: 1e-3, µs: 1e-3, μs: 1e-3, ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** A Go duration ("3s", "1m30s", "500ms", "0"), as envoyproxy/ratelimit's envconfig reads its interval
 * settings with time.ParseDuration; a bare number is taken as seconds. Milliseconds, or undefined. */
export function parseGoDuration(text: string): number | undefined {
  const t = text.trim();
  if (t === '0') return 0;
  if (/^\d+(\.\d+)?$/.test(t)) return Number(t) * 1000;
  const part = /(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)/gy;
  let ms = 0;
  let at = 0;
  for (let m = part.exec(t); m; m = part.exec(t)) {
    ms += Number(m[1]) * GO_DURATION_UNITS[m[2]!]!;
    at = part.lastIndex;
  }
  return at === t.length && at > 0 ? ms : undefined;
}

/** "k1=v1,k2=v2" (CONFIG_GRPC_XDS_NODE_METADATA) or "k1:v1,k2:v2" (envconfig's map form, which
 * CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS uses): an entry without the separator is skipped, as
 * envoyproxy/ratelimit's getClientNode skips it; the value may hold the separator. */
export function parsePairs(text: string, separator: '=' | ':'): Record<string, string> {
  const out: Record<string, string> = {};
  for (const entry of text.split(',')) {
    const at = entry.indexOf(separator);
    if (at > 0) out[entry.slice(0, at).trim()] = entry.slice(at + 1).trim();
  }
  return out;
}
