import { parseArgs } from 'node:util';
import * as grpc from '@grpc/grpc-js';
import type { XdsOptions } from './config/xds/source.js';
import type { LogFormat } from './logger.js';
import type { ResponseSettings } from './response/header-policy.js';
import { DECISION_LOG_MODES, type DecisionLogMode } from './server/decision-log.js';
import type { RequestBounds } from './server/request.js';
import type { GrpcTlsFiles } from './server/tls.js';
import { parseBool, parseGoDuration, parsePairs, redisUrlFrom, runtimeConfigDir, SettingsError, settingNotes } from './settings-compat.js';
import { outputSettings, type PrometheusListener } from './settings-outputs.js';
import { grpcTlsFiles, redisTlsFiles, xdsCredentials } from './settings-tls.js';
import { FAILURE_POLICIES, type FailurePolicy } from './store/failure-policy.js';
import { parseRedisUrl, type RedisConnection, type RedisType, RedisUrlError } from './store/redis-connection.js';
import type { TracingOptions } from './tracing/tracing.js';
import { VERSION } from './version.js';

export { SettingsError } from './settings-compat.js';
export { type LogLevel, SERVE_ENV_NAMES, SERVE_OPTIONS, serveHelp } from './settings-table.js';

import { LEVEL_ALIASES, LOG_LEVELS, type LogLevel, type OptionName, SERVE_OPTIONS, type Setting } from './settings-table.js';

/** The only reader of process.env and command-line flags. Flags win over environment. */
export interface Settings {
  configDir: string;
  grpcHost: string;
  grpcPort: number;
  httpHost: string;
  httpPort: number;
  /** The admin API's own listener, so the HTTP port can be opened to Prometheus without exposing it. */
  adminHost: string;
  adminPort: number;
  store: 'memory' | 'redis';
  redisUrl: string;
  /** Parsed from redisUrl and redisType when the store is redis. */
  redis: RedisConnection | undefined;
  redisTimeoutMs: number;
  redisFailure: FailurePolicy;
  /** /readyz fails while the store is degraded, whatever the policy absorbs (docs/kubernetes.md: central vs sidecar). */
  readyRequiresStore: boolean;
  redisKeyPrefix: string;
  redisSentinelPassword: string | undefined;
  /** Answer requests for windows known to be full without a store round trip. */
  localCache: boolean;
  shadowMode: boolean;
  /** envoyproxy/ratelimit's QUOTA_MODE: every descriptor in quota mode. */
  quotaMode: boolean;
  /** STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false: every hit counted past the limit (every descriptor in
   * charge_mode), as envoyproxy/ratelimit's default counts it (src/redis/fixed_cache_impl.go getHitsAddend). */
  countPastLimit: boolean;
  /** envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA: answers carry dynamic_metadata. */
  responseDynamicMetadata: boolean;
  /** envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG: files of one domain are merged. */
  mergeDomainConfig: boolean;
  bounds: RequestBounds;
  maxCounters: number;
  logLevel: LogLevel;
  /** json (pino's lines) or text (one readable line per event), as envoyproxy/ratelimit's LOG_FORMAT. */
  logFormat: LogFormat;
  /** Set when no store was chosen but envoyproxy/ratelimit's Redis variables were (their names): the Redis
   * store is used, as envoyproxy/ratelimit would, and start-up says so. */
  storeInferredFrom: string[] | undefined;
  /** envoyproxy/ratelimit variables set in the environment that Tollgate does not act on: warned about once. */
  unsupported: string[];
  /** envoyproxy/ratelimit variables set to what Tollgate does anyway, or that configure nothing with this
   * CONFIG_TYPE: named in the same start-up line, as not needed. */
  unneeded: string[];
  /** Longest wait for in-flight calls on SIGTERM before they are cut. */
  shutdownTimeoutMs: number;
  /** How often the config directory is re-read (behind fs.watch); 0 turns reloading off. */
  configPollMs: number;
  /** Largest descriptor config file read, in bytes; the directory may hold DIR_BYTES_FACTOR times this. */
  maxConfigBytes: number;
  nearLimitRatio: number;
  /** Bearer token of the admin API; unset: the admin API is off. Environment only: flags show in `ps`. */
  adminToken: string | undefined;
  /** How often each replica re-reads tier assignments from Redis, behind pub/sub. */
  tierRefreshMs: number;
  /** Processes serving the same ports (node:cluster); more than one needs the Redis store. */
  workers: number;
  /** CONFIG_TYPE=GRPC_XDS_SOTW: configs come from this xDS management server instead of configDir. */
  xds: XdsOptions | undefined;
  /** FORCE_START_WITHOUT_INITIAL_CONFIG: with xDS, ready before the first config arrives. */
  forceStart: boolean;
  /** GRPC_SERVER_USE_TLS: the gRPC port's TLS files; undefined for plaintext. */
  grpcTls: GrpcTlsFiles | undefined;
  /** Which headers and 429 body answers carry (RESPONSE_HEADERS, LIMIT_RESPONSE_HEADERS_ENABLED, …). */
  responses: ResponseSettings;
  /** USE_PROMETHEUS: /metrics on a listener of its own too (PROMETHEUS_ADDR, PROMETHEUS_PATH). */
  prometheus: PrometheusListener | undefined;
  /** The Rate Limit Quota Service on the gRPC port (docs/rlqs.md). */
  rlqs: RlqsSettings;
  /** TRACING_ENABLED: how spans are sampled and sent; undefined when tracing is off. */
  tracing: Omit<TracingOptions, 'version'> | undefined;
  decisionLog: { mode: DecisionLogMode; maxPerSecond: number };
}

/** Flags win over the environment, which wins over the default. */
function settingsReader(values: Record<string, unknown>, env: NodeJS.ProcessEnv): (name: OptionName) => Setting {
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
function storeInferredFrom(flag: unknown, env: NodeJS.ProcessEnv): string[] | undefined {
  if (flag !== undefined || env.BACKEND_TYPE) return undefined;
  const set = redisVariablesSet(env);
  return set.length > 0 ? set : undefined;
}

export function parseServeArgs(args: string[], env: NodeJS.ProcessEnv = process.env): Settings {
  const { values } = parseArgs({
    args,
    strict: true,
    allowPositionals: false,
    options: Object.fromEntries(Object.keys(SERVE_OPTIONS).map((k) => [k, { type: 'string' as const }])),
  });
  const setting = settingsReader(values, env);
  const get = (name: OptionName): string => setting(name).value;
  const num = (name: OptionName, kind: keyof typeof NUMBERS): number => numberOf(setting(name), kind);
  const flag = (name: OptionName): boolean => parseBool(setting(name).value, setting(name).from);
  const store = choice(setting('store'), ['memory', 'redis'] as const, { memcache: 'Tollgate has no memcache store' });
  const fromXds = choice(setting('config-type'), ['file', 'grpc_xds_sotw'] as const) === 'grpc_xds_sotw';
  return {
    configDir: get('config'),
    grpcHost: get('grpc-host'),
    grpcPort: num('grpc-port', 'port'),
    httpHost: get('http-host'),
    httpPort: num('http-port', 'port'),
    adminHost: get('admin-host'),
    adminPort: num('admin-port', 'port'),
    store,
    redisUrl: get('redis-url'),
    redis: store === 'redis' ? redisConnection(setting, env) : undefined,
    redisTimeoutMs: num('redis-timeout-ms', 'positive'),
    redisFailure: choice(setting('redis-failure'), FAILURE_POLICIES),
    readyRequiresStore: flag('ready-requires-store'),
    redisKeyPrefix: get('redis-key-prefix'),
    redisSentinelPassword: get('redis-sentinel-password') || undefined,
    localCache: flag('local-cache'),
    shadowMode: flag('shadow-mode'),
    quotaMode: flag('quota-mode'),
    countPastLimit: !flag('stop-increment-when-over-limit'),
    responseDynamicMetadata: flag('response-dynamic-metadata'),
    mergeDomainConfig: flag('merge-domain-config'),
    bounds: {
      maxDescriptors: num('max-descriptors', 'positive'),
      maxEntries: num('max-entries', 'positive'),
      maxValueBytes: num('max-value-bytes', 'positive'),
    },
    maxCounters: num('max-counters', 'positive'),
    logLevel: logLevelOf(setting('log-level')),
    logFormat: choice(setting('log-format'), ['json', 'text'] as const),
    storeInferredFrom: storeInferredFrom(values.store, env),
    ...settingNotes(env, fromXds),
    shutdownTimeoutMs: num('shutdown-timeout-ms', 'positive'),
    configPollMs: num('config-poll-ms', 'whole'),
    maxConfigBytes: num('max-config-bytes', 'positive'),
    nearLimitRatio: num('near-limit-ratio', 'ratio'),
    adminToken: env.TOLLGATE_ADMIN_TOKEN || undefined,
    tierRefreshMs: num('tier-refresh-ms', 'positive'),
    workers: workersOf(setting('workers'), store),
    xds: fromXds ? xdsOptions(setting) : undefined,
    forceStart: flag('force-start-without-initial-config'),
    grpcTls: flag('grpc-tls') ? grpcTlsFiles(setting) : undefined,
    ...outputSettings(setting, fromXds ? 'xds' : 'file'),
    tracing: flag('tracing') ? tracingOptions(setting) : undefined,
    decisionLog: { mode: choice(setting('decision-log'), DECISION_LOG_MODES), maxPerSecond: num('decision-log-max-per-second', 'positive') },
    rlqs: rlqsSettings(setting),
  };
}

export interface RlqsSettings {
  /** How often Envoy reports usage: whole seconds, as Envoy counts them (5 s, hard-coded in Envoy today). */
  reportIntervalMs: number;
  /** Most buckets one stream holds; new ones past it are abandoned. */
  maxBuckets: number;
  /** What a bucket no rule matches gets: ALLOW_ALL or DENY_ALL. */
  unmatched: 'allow' | 'deny';
}

function rlqsSettings(setting: (name: OptionName) => Setting): RlqsSettings {
  const interval = setting('rlqs-report-interval');
  const reportIntervalMs = durationOf(interval);
  if (reportIntervalMs < 1000 || reportIntervalMs % 1000 !== 0)
    throw new SettingsError(`${interval.from}: a whole number of seconds, at least 1s (Envoy reports and reads durations in seconds)`);
  return {
    reportIntervalMs,
    maxBuckets: numberOf(setting('rlqs-max-buckets'), 'positive'),
    unmatched: choice(setting('rlqs-unmatched'), ['allow', 'deny'] as const),
  };
}

/** envoyproxy/ratelimit's TRACING_* (src/settings/settings.go, src/trace/trace.go), and the batch
 * processor's standard OTEL_BSP_* variables. Its `http` is OTLP/HTTP with protobuf bodies (otlptracehttp). */
function tracingOptions(setting: (name: OptionName) => Setting): Omit<TracingOptions, 'version'> {
  const protocol = choice(setting('tracing-exporter-protocol'), ['http', 'http/protobuf', 'http/json', 'grpc'] as const);
  return {
    protocol: protocol === 'http' ? 'http/protobuf' : protocol,
    serviceName: setting('tracing-service-name').value,
    serviceNamespace: setting('tracing-service-namespace').value,
    serviceInstanceId: setting('tracing-service-instance-id').value,
    samplingRate: numberOf(setting('tracing-sampling-rate'), 'share'),
    queue: {
      maxQueueSize: numberOf(setting('tracing-queue-size'), 'positive'),
      maxExportBatchSize: numberOf(setting('tracing-batch-size'), 'positive'),
      scheduledDelayMs: numberOf(setting('tracing-schedule-delay-ms'), 'positive'),
      exportTimeoutMs: numberOf(setting('tracing-export-timeout-ms'), 'positive'),
    },
  };
}

/** The xDS client's settings, by envoyproxy/ratelimit's names (src/settings/settings.go); its TLS files are
 * read now, so a missing one stops the start with its variable named. */
function xdsOptions(setting: (name: OptionName) => Setting): XdsOptions {
  const text = (name: OptionName): string => setting(name).value;
  const ms = (name: OptionName): number => durationOf(setting(name));
  const tls = parseBool(text('xds-tls'), setting('xds-tls').from);
  const factor = numberOf(setting('xds-backoff-factor'), 'above0');
  const headers = parsePairs(text('xds-headers'), ':');
  for (const name of Object.keys(headers)) {
    if (!/^[0-9a-z_.-]+$/i.test(name) || name.toLowerCase().endsWith('-bin'))
      throw new SettingsError(`${setting('xds-headers').from}: header names are letters, digits, "_", "." and "-" (one is not)`);
  }
  return {
    target: text('xds-server-url'),
    credentials: tls ? xdsCredentials(setting) : grpc.credentials.createInsecure(),
    serverName: text('xds-tls-san') || undefined,
    headers,
    node: { id: text('xds-node-id'), metadata: parsePairs(text('xds-node-metadata'), '='), userAgentVersion: VERSION },
    maxMessageBytes: numberOf(setting('xds-max-msg-bytes'), 'positive'),
    connectRetryMs: Math.max(ms('xds-connect-retry-interval'), 100),
    backoff: {
      initialMs: ms('xds-backoff-initial'),
      maxMs: ms('xds-backoff-max'),
      factor,
      jitter: parseBool(text('xds-backoff-jitter'), setting('xds-backoff-jitter').from),
    },
  };
}

function durationOf(s: Setting): number {
  const ms = parseGoDuration(s.value);
  if (ms === undefined) throw new SettingsError(`${s.from} must be a duration such as 3s, 500ms or 1m30s (got "${s.value}")`);
  return ms;
}

/** Several workers share counters only through Redis: with the memory store each would admit the whole limit. */
function workersOf(s: Setting, store: 'memory' | 'redis'): number {
  const n = numberOf(s, 'positive');
  if (n > 1 && store !== 'redis')
    throw new SettingsError(
      `${s.from} ${n} needs --store redis: the memory store's counters are per process, so ${n} workers would each admit the whole limit`,
    );
  return n;
}

/** One of `options`, in any case (envoyproxy/ratelimit writes BACKEND_TYPE=REDIS, REDIS_TYPE=SINGLE). */
function choice<T extends string>(s: Setting, options: readonly T[], unsupported: Record<string, string> = {}): T {
  const lower = s.value.trim().toLowerCase();
  if ((options as readonly string[]).includes(lower)) return lower as T;
  const why = unsupported[lower] ? `: ${unsupported[lower]}` : '';
  throw new SettingsError(`${s.from} must be ${options.slice(0, -1).join(', ')} or ${options.at(-1)} (got "${s.value}")${why}`);
}

function logLevelOf(s: Setting): LogLevel {
  const lower = s.value.trim().toLowerCase();
  const level = LEVEL_ALIASES[lower] ?? lower;
  if ((LOG_LEVELS as readonly string[]).includes(level)) return level as LogLevel;
  throw new SettingsError(`${s.from} must be one of ${LOG_LEVELS.join(', ')} (got "${s.value}")`);
}

/** The URL's errors never echo it: it may hold a password. The client's TLS files come with it (settings-tls.ts). */
function redisConnection(setting: (name: OptionName) => Setting, env: NodeJS.ProcessEnv): RedisConnection {
  const type: RedisType = choice(setting('redis-type'), ['single', 'sentinel', 'cluster'] as const);
  const url = setting('redis-url');
  let conn: RedisConnection;
  try {
    conn = parseRedisUrl(redisUrlFrom(url, type, env), type);
  } catch (err) {
    if (err instanceof RedisUrlError) throw new SettingsError(`${url.from}: ${err.message}`);
    throw err;
  }
  return { ...conn, tlsFiles: redisTlsFiles(setting, conn.tls, `REDIS_TLS=true or a rediss:// URL in ${url.from}`) };
}

/** The kinds of number a setting can be, and how an error names them. */
const NUMBERS = {
  positive: { ok: (n: number) => Number.isInteger(n) && n > 0, what: 'a positive whole number' },
  whole: { ok: (n: number) => Number.isInteger(n) && n >= 0, what: 'a whole number' },
  port: { ok: (n: number) => Number.isInteger(n) && n >= 0 && n <= 65535, what: 'a port number 0-65535' },
  ratio: { ok: (n: number) => n > 0 && n <= 1, what: 'a number above 0 and at most 1' },
  share: { ok: (n: number) => n >= 0 && n <= 1, what: 'a number from 0 to 1' },
  above0: { ok: (n: number) => Number.isFinite(n) && n > 0, what: 'a number above 0' },
} as const;

/** --max-config-bytes for commands other than serve (check-config), read as serve reads it. */
export function maxConfigBytesOf(flag: string | undefined, env: NodeJS.ProcessEnv = process.env): number {
  return numberOf(settingsReader({ 'max-config-bytes': flag }, env)('max-config-bytes'), 'positive');
}

function numberOf(s: Setting, kind: keyof typeof NUMBERS): number {
  const n = s.value.trim() === '' ? NaN : Number(s.value);
  if (!NUMBERS[kind].ok(n)) throw new SettingsError(`${s.from} must be ${NUMBERS[kind].what} (got "${s.value}")`);
  return n;
}
