import { parseArgs } from 'node:util';
import type { LogFormat } from '../logger.js';
import { DECISION_LOG_MODES, type DecisionLogMode } from '../observe/decision-log.js';
import type { ResponseSettings } from '../response/header-policy.js';
import type { RequestBounds } from '../rls/request.js';
import type { GrpcTlsFiles } from '../server/tls.js';
import type { BatchWindow } from '../store/batch-queues.js';
import { FAILURE_POLICIES, type FailurePolicy } from '../store/failure-policy.js';
import type { RedisConnection } from '../store/redis-connection.js';
import type { TracingOptions } from '../tracing/tracing.js';
import type { XdsOptions } from '../xds/source.js';
import { parseBool, SettingsError, settingNotes } from './compat.js';
import { outputSettings, type PrometheusListener } from './outputs.js';
import { settingsReader, storeInferredFrom } from './reader.js';
import { type RlqsSettings, redisConnection, rlqsSettings, tracingOptions, xdsServers } from './sections.js';
import { type LogLevel, type OptionName, SERVE_OPTIONS, type Setting } from './table.js';
import { grpcTlsFiles } from './tls.js';
import { batchWindowOf, choice, logLevelOf, type NUMBERS, numberOf, workersOf } from './values.js';

/** What the service runs with, read from flags and environment: this file assembles it, reader.ts finds each
 * setting's text (flag, variable, envoyproxy/ratelimit's variable, default), values.ts and sections.ts parse it. */

export { SettingsError } from './compat.js';
export type { RlqsSettings } from './sections.js';
export { type LogLevel, SERVE_ENV_NAMES, SERVE_OPTIONS, serveHelp } from './table.js';

/** The only reader of process.env and command-line flags. Flags win over environment. */
export interface Settings {
  configDir: string;
  grpcHost: string;
  /** Who serves ShouldRateLimit (server/hot-path.ts): node:http2 directly, or grpc-js like every other method. */
  grpcServer: 'http2' | 'grpc-js';
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
  /** REDIS_PIPELINE_WINDOW and REDIS_PIPELINE_LIMIT: how long requests wait to share a Redis call. */
  redisBatch: BatchWindow;
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
  /** USE_CALENDAR_MONTH_RATE_LIMIT (config/calendar-months.ts). */
  calendarMonths: boolean;
  bounds: RequestBounds;
  maxCounters: number;
  /** USAGE_LEDGER_MAX_LEN (store/usage-ledger.ts). */
  usageMaxLen: number;
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
  /** heap-trim.ts: how often to look for a quiet process with a grown heap (0: never). */
  heapTrimMs: number;
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
  /** CONFIG_TYPE=GRPC_XDS_SOTW: configs come from these xDS management servers (CONFIG_GRPC_XDS_SERVER_URL,
   * comma-separated), each owning its domains; empty for CONFIG_TYPE=FILE. */
  xdsServers: readonly XdsOptions[];
  /** XDS_OVERLAY_FILE: Tollgate's own keys for rules the xDS servers generate (config/overlay.ts). */
  xdsOverlay: string | undefined;
  /** Whether domains from xDS count past the limit beside a config directory (countPastLimit's xDS default). */
  xdsCountPastLimit: boolean;
  /** configDir is read: CONFIG_TYPE=FILE, alone or beside GRPC_XDS_SOTW (CONFIG_TYPE=GRPC_XDS_SOTW,FILE). */
  fromDir: boolean;
  /** FORCE_START_WITHOUT_INITIAL_CONFIG: with xDS, ready before the first config arrives. */
  forceStart: boolean;
  /** GRPC_PLAINTEXT_PORT: beside the TLS port, the same services in plaintext (AI Gateway's quota cluster has
   * no TLS); undefined when unset. */
  grpcPlaintextPort: number | undefined;
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

/** Every serve flag is a string here; what it means is read by the setting it names. */
/** Flags that may be given more than once: their values are joined as the variable lists them. */
const REPEATABLE = new Set<string>(['xds-server-url', 'xds-node-id', 'xds-tls', 'config-type']);

function flagValues(args: string[]): Record<string, string | undefined> {
  const options = Object.fromEntries(Object.keys(SERVE_OPTIONS).map((k) => [k, { type: 'string' as const, multiple: REPEATABLE.has(k) }]));
  const values = parseArgs({ args, strict: true, allowPositionals: false, options }).values as Record<string, string | string[] | undefined>;
  return Object.fromEntries(Object.entries(values).map(([k, v]) => [k, Array.isArray(v) ? v.join(',') : v]));
}

/** Configs from xDS are made for envoyproxy/ratelimit (Envoy Gateway's): unless told, its default applies
 * (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false), and every hit is counted past the limit, so AI Gateway's
 * token costs are charged as there. A config directory keeps Tollgate's default (true). */
function countPastLimit(values: Record<string, unknown>, env: NodeJS.ProcessEnv, fromXds: boolean, flag: (n: OptionName) => boolean): boolean {
  const told = values['stop-increment-when-over-limit'] !== undefined || !!env.STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT;
  return told ? !flag('stop-increment-when-over-limit') : fromXds;
}

/** GRPC_PLAINTEXT_PORT only means something beside a TLS port. */
function plaintextPort(setting: (name: OptionName) => Setting, tls: boolean): number | undefined {
  const s = setting('grpc-plaintext-port');
  if (s.value === '') return undefined;
  if (!tls) throw new SettingsError(`${s.from} is a second, plaintext gRPC port beside a TLS one: without --grpc-tls the gRPC port is plaintext already`);
  const port = numberOf(s, 'port');
  if (port !== 0 && port === numberOf(setting('grpc-port'), 'port'))
    throw new SettingsError(`${s.from} must differ from ${setting('grpc-port').from} (both ${port})`);
  return port;
}

/** XDS_OVERLAY_FILE only means something for configs from xDS. */
function overlayFile(setting: (name: OptionName) => Setting, fromXds: boolean): string | undefined {
  const s = setting('xds-overlay');
  if (s.value === '') return undefined;
  if (!fromXds) throw new SettingsError(`${s.from} sets keys on rules from xDS: it needs --config-type grpc_xds_sotw (a config file can say them itself)`);
  return s.value;
}

type SourceSettings = Pick<Settings, 'xdsServers' | 'xdsOverlay' | 'fromDir' | 'countPastLimit' | 'xdsCountPastLimit'>;

/** Where configs come from, and how their hits count: xDS alone counts as envoyproxy/ratelimit does; beside
 * a config directory, each domain as its source says (PlanContext.xdsCharge). */
function configSources(
  setting: (name: OptionName) => Setting,
  values: Record<string, unknown>,
  env: NodeJS.ProcessEnv,
  flag: (n: OptionName) => boolean,
): SourceSettings {
  const types = configTypes(setting('config-type'));
  const fromXds = types.has('grpc_xds_sotw');
  return {
    xdsServers: fromXds ? xdsServers(setting) : [],
    xdsOverlay: overlayFile(setting, fromXds),
    fromDir: types.has('file'),
    countPastLimit: countPastLimit(values, env, fromXds && !types.has('file'), flag),
    xdsCountPastLimit: countPastLimit(values, env, true, flag),
  };
}

/** CONFIG_TYPE: FILE, GRPC_XDS_SOTW, or both comma-separated (the config directory beside the xDS servers). */
function configTypes(s: Setting): Set<'file' | 'grpc_xds_sotw'> {
  return new Set(s.value.split(',').map((part: string) => choice({ value: part, from: s.from }, ['file', 'grpc_xds_sotw'] as const)));
}

function readers(setting: (name: OptionName) => Setting) {
  return [
    (name: OptionName): string => setting(name).value,
    (name: OptionName, kind: keyof typeof NUMBERS): number => numberOf(setting(name), kind),
    (name: OptionName): boolean => parseBool(setting(name).value, setting(name).from),
  ] as const;
}

export function parseServeArgs(args: string[], env: NodeJS.ProcessEnv = process.env): Settings {
  const values = flagValues(args);
  const setting = settingsReader(values, env);
  const [get, num, flag] = readers(setting);
  const store = choice(setting('store'), ['memory', 'redis'] as const, { memcache: 'Tollgate has no memcache store' });
  const sources = configSources(setting, values, env, flag);
  const xdsOnly = sources.xdsServers.length > 0 && !sources.fromDir; // answered as envoyproxy/ratelimit answers
  const redisTimeoutMs = num('redis-timeout-ms', 'positive');
  return {
    configDir: get('config'),
    grpcHost: get('grpc-host'),
    grpcServer: choice(setting('grpc-server'), ['http2', 'grpc-js'] as const),
    grpcPort: num('grpc-port', 'port'),
    httpHost: get('http-host'),
    httpPort: num('http-port', 'port'),
    adminHost: get('admin-host'),
    adminPort: num('admin-port', 'port'),
    store,
    redisUrl: get('redis-url'),
    redis: store === 'redis' ? redisConnection(setting, env) : undefined,
    redisTimeoutMs,
    redisBatch: batchWindowOf(setting('redis-pipeline-window'), setting('redis-pipeline-limit'), redisTimeoutMs),
    redisFailure: choice(setting('redis-failure'), FAILURE_POLICIES),
    readyRequiresStore: flag('ready-requires-store'),
    redisKeyPrefix: get('redis-key-prefix'),
    redisSentinelPassword: get('redis-sentinel-password') || undefined,
    localCache: flag('local-cache'),
    shadowMode: flag('shadow-mode'),
    quotaMode: flag('quota-mode'),
    ...sources,
    responseDynamicMetadata: flag('response-dynamic-metadata'),
    ...configReading(flag),
    bounds: {
      maxDescriptors: num('max-descriptors', 'positive'),
      maxEntries: num('max-entries', 'positive'),
      maxValueBytes: num('max-value-bytes', 'positive'),
    },
    ...storeBounds(num),
    logLevel: logLevelOf(setting('log-level')),
    logFormat: choice(setting('log-format'), ['json', 'text'] as const),
    storeInferredFrom: storeInferredFrom(values.store, env),
    ...settingNotes(env, xdsOnly),
    shutdownTimeoutMs: num('shutdown-timeout-ms', 'positive'),
    heapTrimMs: num('heap-trim-ms', 'whole'),
    configPollMs: num('config-poll-ms', 'whole'),
    maxConfigBytes: num('max-config-bytes', 'positive'),
    nearLimitRatio: num('near-limit-ratio', 'ratio'),
    adminToken: env.TOLLGATE_ADMIN_TOKEN || undefined,
    tierRefreshMs: num('tier-refresh-ms', 'positive'),
    workers: workersOf(setting('workers'), store),
    forceStart: flag('force-start-without-initial-config'),
    grpcTls: flag('grpc-tls') ? grpcTlsFiles(setting) : undefined,
    grpcPlaintextPort: plaintextPort(setting, flag('grpc-tls')),
    ...outputSettings(setting, xdsOnly ? 'xds' : 'file'),
    tracing: flag('tracing') ? tracingOptions(setting) : undefined,
    decisionLog: { mode: choice(setting('decision-log'), DECISION_LOG_MODES), maxPerSecond: num('decision-log-max-per-second', 'positive') },
    rlqs: rlqsSettings(setting),
  };
}

/** How config files and xDS resources are read: MERGE_DOMAIN_CONFIG, USE_CALENDAR_MONTH_RATE_LIMIT. */
function configReading(flag: (name: OptionName) => boolean): Pick<Settings, 'mergeDomainConfig' | 'calendarMonths'> {
  return { mergeDomainConfig: flag('merge-domain-config'), calendarMonths: flag('use-calendar-month-rate-limit') };
}

/** What the store holds at most: counters (memory) and usage ledger events. */
function storeBounds(num: (name: OptionName, kind: keyof typeof NUMBERS) => number): Pick<Settings, 'maxCounters' | 'usageMaxLen'> {
  return { maxCounters: num('max-counters', 'positive'), usageMaxLen: num('usage-ledger-max-len', 'ledger') };
}

/** --max-config-bytes for commands other than serve (check-config), read as serve reads it. */
export function maxConfigBytesOf(flag: string | undefined, env: NodeJS.ProcessEnv = process.env): number {
  return numberOf(settingsReader({ 'max-config-bytes': flag }, env)('max-config-bytes'), 'positive');
}
