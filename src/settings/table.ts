import { DEFAULT_MAX_CONFIG_BYTES, DIR_BYTES_FACTOR } from '../config/load.js';
import { defaultBounds } from '../rls/request.js';

/** The table of `tollgate serve`'s settings: each flag, its environment variable, its default and its help
 * line; settings.ts reads them. */

export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];
/** Other names for the levels: logrus's (envoyproxy/ratelimit's LOG_LEVEL), so its settings keep working. */
export const LEVEL_ALIASES: Record<string, LogLevel> = { warning: 'warn', panic: 'fatal' };

/** A setting's text and where it came from (`--grpc-port` or `GRPC_PORT`), so that an error names what the
 * operator actually set. */
export interface Setting {
  value: string;
  from: string;
}

/** Each setting: its flag, its environment variable (envoyproxy/ratelimit's name where the meaning is the
 * same), its default, and a line for --help. */
export const SERVE_OPTIONS = {
  config: { env: 'RUNTIME_CONFIG_DIR', default: './config', help: 'directory of descriptor config YAML files' },
  'grpc-host': { env: 'GRPC_HOST', default: '0.0.0.0', help: 'address the gRPC server binds' },
  'grpc-port': { env: 'GRPC_PORT', default: '8081', help: 'gRPC port (RateLimitService, RateLimitQuotaService, grpc.health.v1)' },
  'grpc-server': {
    env: 'GRPC_SERVER',
    default: 'http2',
    help: 'http2: ShouldRateLimit served on node:http2 directly, the rest by grpc-js on the same port | grpc-js: every method by grpc-js',
  },
  'http-host': { env: 'HOST', default: '0.0.0.0', help: 'address the HTTP server binds' },
  'http-port': { env: 'PORT', default: '8080', help: 'HTTP port (/healthz, /readyz, /metrics, /json, /explain)' },
  'admin-host': { env: 'ADMIN_HOST', default: '127.0.0.1', help: 'address the admin API binds (loopback: reach it from the pod)' },
  'admin-port': { env: 'ADMIN_PORT', default: '8082', help: 'admin API port (/admin/*), when TOLLGATE_ADMIN_TOKEN is set' },
  store: { env: 'BACKEND_TYPE', default: 'memory', help: 'counter store: memory | redis' },
  'redis-url': { env: 'REDIS_URL', default: 'redis://127.0.0.1:6379', help: 'redis[s]://[user:password@]host:port[,host:port…][/db|/master]' },
  'redis-type': { env: 'REDIS_TYPE', default: 'single', help: 'single | sentinel | cluster' },
  'redis-timeout-ms': { env: 'REDIS_TIMEOUT_MS', default: '25', help: "longest wait for one decision's Redis round trip" },
  'redis-pipeline-window': {
    env: 'REDIS_PIPELINE_WINDOW',
    default: '0',
    help: 'hold Redis calls this long to put more decisions in each (1ms, 2ms: whole ms, at most 10ms; 0 or under 1ms: each event-loop turn)',
  },
  'redis-pipeline-limit': { env: 'REDIS_PIPELINE_LIMIT', default: '0', help: 'with a window: a call goes at once when it holds this many requests (0: none)' },
  'redis-failure': { env: 'REDIS_FAILURE_POLICY', default: 'allow', help: 'when Redis cannot answer: allow | deny | local' },
  'ready-requires-store': {
    env: 'READY_REQUIRES_STORE',
    default: 'false',
    help: 'not ready while the store fails, whatever the failure policy: true for a central deployment (Envoy uses the other replicas), false for a sidecar',
  },
  'redis-key-prefix': { env: 'REDIS_KEY_PREFIX', default: 'tollgate:', help: 'namespace of every Redis key' },
  'redis-sentinel-password': { env: 'REDIS_SENTINEL_PASSWORD', default: '', help: 'password of the sentinels (prefer the env variable)' },
  'local-cache': { env: 'LOCAL_CACHE', default: 'true', help: 'answer windows known to be full without Redis (true | false)' },
  'shadow-mode': { env: 'SHADOW_MODE', default: 'false', help: 'report decisions but admit every request (true | false)' },
  'quota-mode': { env: 'QUOTA_MODE', default: 'false', help: 'every descriptor in quota mode: over only when all quota descriptors are (true | false)' },
  'stop-increment-when-over-limit': {
    env: 'STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT',
    default: 'true',
    help:
      'false: every hit is counted, past the limit too, as envoyproxy/ratelimit counts by default (every descriptor in charge_mode); ' +
      'unset, false with --config-type grpc_xds_sotw',
  },
  'response-dynamic-metadata': {
    env: 'RESPONSE_DYNAMIC_METADATA',
    default: 'false',
    help: 'answer with dynamic_metadata: domain, descriptors, metadata (true | false)',
  },
  'merge-domain-config': { env: 'MERGE_DOMAIN_CONFIG', default: 'false', help: 'merge config files that name the same domain (true | false)' },
  'use-calendar-month-rate-limit': {
    env: 'USE_CALENDAR_MONTH_RATE_LIMIT',
    default: 'false',
    help: "MONTH limits count in UTC calendar months, as envoyproxy/ratelimit's setting of that name (true | false)",
  },
  'max-descriptors': { env: 'MAX_DESCRIPTORS', default: String(defaultBounds.maxDescriptors), help: 'most descriptors in one request' },
  'max-entries': { env: 'MAX_DESCRIPTOR_ENTRIES', default: String(defaultBounds.maxEntries), help: 'most entries in one descriptor' },
  'max-value-bytes': { env: 'MAX_VALUE_BYTES', default: String(defaultBounds.maxValueBytes), help: 'longest entry key or value, in bytes' },
  'max-counters': { env: 'MAX_COUNTERS', default: '1000000', help: 'memory store: most counters held (oldest evicted beyond)' },
  'usage-ledger-max-len': {
    env: 'USAGE_LEDGER_MAX_LEN',
    default: '1000000',
    help: 'usage ledger (rules with `usage`): about how many events each Redis stream (or the memory ring) keeps; older go, exported or not',
  },
  'log-level': { env: 'LOG_LEVEL', default: 'info', help: `${LOG_LEVELS.join(' | ')} (any case; warning = warn)` },
  'log-format': { env: 'LOG_FORMAT', default: 'json', help: 'json (one JSON object a line) | text (readable lines)' },
  'shutdown-timeout-ms': { env: 'SHUTDOWN_TIMEOUT_MS', default: '10000', help: 'wait for in-flight calls on SIGTERM' },
  'heap-trim-ms': {
    env: 'HEAP_TRIM_MS',
    default: '5000',
    help: 'look this often: when quiet and grown by a burst, the heap is given back to the system (0: never)',
  },
  'config-poll-ms': { env: 'CONFIG_POLL_MS', default: '1000', help: 're-read the config directory this often (0: no hot reload)' },
  'max-config-bytes': {
    env: 'MAX_CONFIG_BYTES',
    default: String(DEFAULT_MAX_CONFIG_BYTES),
    help: `largest config file read, in bytes (the directory: ${DIR_BYTES_FACTOR} times this)`,
  },
  'near-limit-ratio': { env: 'NEAR_LIMIT_RATIO', default: '0.8', help: 'share of a window that counts as near its limit (metrics)' },
  'tier-refresh-ms': { env: 'TIER_REFRESH_MS', default: '2000', help: 'redis store: re-read tier assignments this often (pub/sub is faster)' },
  workers: { env: 'WORKERS', default: '1', help: 'redis store: processes sharing the ports, one per core to use' },
  'grpc-plaintext-port': {
    env: 'GRPC_PLAINTEXT_PORT',
    default: '',
    help: 'with --grpc-tls: the same gRPC services without TLS on this port too, for clients that cannot do TLS (AI Gateway)',
  },
  'grpc-tls': { env: 'GRPC_SERVER_USE_TLS', default: 'false', help: 'TLS on the gRPC port (true | false)' },
  'grpc-tls-cert': { env: 'GRPC_SERVER_TLS_CERT', default: '', help: "the gRPC port's certificate file (PEM), re-read every minute" },
  'grpc-tls-key': { env: 'GRPC_SERVER_TLS_KEY', default: '', help: 'its key file (PEM)' },
  'grpc-tls-client-ca': {
    env: 'GRPC_CLIENT_TLS_CACERT',
    default: '',
    help: 'CA file (PEM): clients must present a certificate it signed (mTLS); else GRPC_SERVER_TLS_CA_CERT (Envoy Gateway)',
  },
  'response-headers': {
    env: 'RESPONSE_HEADERS',
    default: 'auto',
    help: "Tollgate's own headers, Retry-After and 429 body: auto (file configs as they say, xDS configs none) | on | off",
  },
  'limit-response-headers': {
    env: 'LIMIT_RESPONSE_HEADERS_ENABLED',
    default: '',
    help: "envoyproxy/ratelimit's three headers on every answer without Tollgate's own (true | false)",
  },
  'limit-limit-header': { env: 'LIMIT_LIMIT_HEADER', default: 'RateLimit-Limit', help: 'with --limit-response-headers: the limit header' },
  'limit-remaining-header': { env: 'LIMIT_REMAINING_HEADER', default: 'RateLimit-Remaining', help: 'with --limit-response-headers: the remaining header' },
  'limit-reset-header': { env: 'LIMIT_RESET_HEADER', default: 'RateLimit-Reset', help: 'with --limit-response-headers: seconds until the reset' },
  'limit-request-headers': {
    env: 'LIMIT_REQUEST_HEADERS_ENABLED',
    default: 'false',
    help: "envoyproxy/ratelimit's three headers on the request Envoy forwards upstream (true | false)",
  },
  'limit-request-limit-header': { env: 'LIMIT_REQUEST_LIMIT_HEADER', default: 'RateLimit-Limit', help: 'with --limit-request-headers: the limit header' },
  'limit-request-remaining-header': {
    env: 'LIMIT_REQUEST_REMAINING_HEADER',
    default: 'RateLimit-Remaining',
    help: 'with --limit-request-headers: the remaining header',
  },
  'limit-request-reset-header': {
    env: 'LIMIT_REQUEST_RESET_HEADER',
    default: 'RateLimit-Reset',
    help: 'with --limit-request-headers: seconds until the reset',
  },
  prometheus: { env: 'USE_PROMETHEUS', default: 'false', help: '/metrics on --prometheus-addr too, alone (true | false)' },
  'prometheus-addr': { env: 'PROMETHEUS_ADDR', default: ':9090', help: 'with --prometheus: [host]:port of the metrics listener' },
  'prometheus-path': { env: 'PROMETHEUS_PATH', default: '/metrics', help: 'with --prometheus: the path the metrics are served at there' },
  'redis-tls-cert': { env: 'REDIS_TLS_CLIENT_CERT', default: '', help: 'redis over TLS: client certificate file (PEM), for mutual TLS' },
  'redis-tls-key': { env: 'REDIS_TLS_CLIENT_KEY', default: '', help: 'redis over TLS: its key file (PEM)' },
  'redis-tls-cacert': { env: 'REDIS_TLS_CACERT', default: '', help: "redis over TLS: CA file (PEM) trusted beside the system's" },
  'redis-tls-skip-hostname-verification': {
    env: 'REDIS_TLS_SKIP_HOSTNAME_VERIFICATION',
    default: 'false',
    help: "redis over TLS: check the server's certificate chain but not its name (true | false)",
  },
  'config-type': {
    env: 'CONFIG_TYPE',
    default: 'FILE',
    help: 'where descriptor configs come from: FILE (--config) | GRPC_XDS_SOTW (xDS management servers) | GRPC_XDS_SOTW,FILE (both)',
  },
  'force-start-without-initial-config': {
    env: 'FORCE_START_WITHOUT_INITIAL_CONFIG',
    default: 'false',
    help: 'xDS: ready before the first config arrives (true | false)',
  },
  'xds-server-url': {
    env: 'CONFIG_GRPC_XDS_SERVER_URL',
    default: 'localhost:18000',
    help: 'xDS: the management server, host:port; several comma-separated (or the flag again)',
  },
  'xds-node-id': {
    env: 'CONFIG_GRPC_XDS_NODE_ID',
    default: 'default',
    help: "xDS: the node id the server keeps this service's configs under; one per server, by position",
  },
  'xds-overlay': {
    env: 'XDS_OVERLAY_FILE',
    default: '',
    help: "xDS: a file of Tollgate's own keys to set on generated rules (charge mode, reservations, calendar, tiers, in_flight)",
  },
  'xds-node-metadata': { env: 'CONFIG_GRPC_XDS_NODE_METADATA', default: '', help: 'xDS: node metadata, k1=v1,k2=v2' },
  'xds-headers': {
    env: 'CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS',
    default: '',
    help: 'xDS: gRPC metadata on the stream, k1:v1,k2:v2 (prefer the env variable)',
  },
  'xds-connect-retry-interval': {
    env: 'CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL',
    default: '3s',
    help: 'xDS: while the server cannot be reached, try this often',
  },
  'xds-tls': { env: 'CONFIG_GRPC_XDS_SERVER_USE_TLS', default: 'false', help: 'xDS: TLS to the server (true | false); one per server, by position' },
  'xds-tls-cert': { env: 'CONFIG_GRPC_XDS_CLIENT_TLS_CERT', default: '', help: 'xDS: client certificate file (PEM), for mTLS' },
  'xds-tls-key': { env: 'CONFIG_GRPC_XDS_CLIENT_TLS_KEY', default: '', help: 'xDS: client key file (PEM), for mTLS' },
  'xds-tls-cacert': {
    env: 'CONFIG_GRPC_XDS_SERVER_TLS_CACERT',
    default: '',
    help: "xDS: CA file (PEM) the server's certificate is checked against (unset: the system's CAs)",
  },
  'xds-tls-san': { env: 'CONFIG_GRPC_XDS_SERVER_TLS_SAN', default: '', help: "xDS: name the server's certificate must hold, instead of the host" },
  'xds-backoff-initial': { env: 'XDS_CLIENT_BACKOFF_INITIAL_INTERVAL', default: '10s', help: 'xDS: wait before reopening a broken stream' },
  'xds-backoff-max': { env: 'XDS_CLIENT_BACKOFF_MAX_INTERVAL', default: '60s', help: 'xDS: longest wait between attempts' },
  'xds-backoff-factor': { env: 'XDS_CLIENT_BACKOFF_RANDOM_FACTOR', default: '2', help: 'xDS: each failed attempt multiplies the wait by this' },
  'xds-backoff-jitter': { env: 'XDS_CLIENT_BACKOFF_JITTER', default: 'true', help: 'xDS: draw each wait at random up to its value (true | false)' },
  'xds-max-msg-bytes': { env: 'XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES', default: String(4 * 1024 * 1024), help: 'xDS: largest response accepted, in bytes' },
  'rlqs-report-interval': {
    env: 'RLQS_REPORT_INTERVAL',
    default: '5s',
    help: "RLQS: how often Envoy's rate_limit_quota filter reports (5s in Envoy today); assignments live 3 of them",
  },
  'rlqs-max-buckets': {
    env: 'RLQS_MAX_BUCKETS',
    default: '10000',
    help: 'RLQS: most buckets one stream holds; a new one in use past it gets ALLOW_ALL, no state kept',
  },
  'rlqs-max-streams': { env: 'RLQS_MAX_STREAMS', default: '10000', help: 'RLQS: most streams open at once in all (64 per address, 32 per connection)' },
  'rlqs-max-buckets-total': {
    env: 'RLQS_MAX_BUCKETS_TOTAL',
    default: '50000',
    help: 'RLQS: most buckets held at once by all streams (20000 per address); ~5 KB each',
  },
  'rlqs-cpu-share': { env: 'RLQS_CPU_SHARE', default: '0.25', help: "RLQS: the share of the process's time RLQS work may take, 0-1" },
  'rlqs-unmatched': { env: 'RLQS_UNMATCHED', default: 'allow', help: 'RLQS: what a bucket no rule matches gets: allow (ALLOW_ALL) | deny (DENY_ALL)' },
  tracing: {
    env: 'TRACING_ENABLED',
    default: 'false',
    help: 'OpenTelemetry spans of decisions, sent over OTLP (true | false; endpoint: OTEL_EXPORTER_OTLP_ENDPOINT)',
  },
  'tracing-exporter-protocol': {
    env: 'TRACING_EXPORTER_PROTOCOL',
    default: 'http',
    help: 'OTLP transport: http (= http/protobuf) | http/json | grpc (else OTEL_EXPORTER_OTLP_TRACES_PROTOCOL)',
  },
  'tracing-service-name': { env: 'TRACING_SERVICE_NAME', default: 'RateLimit', help: "service.name of the spans (envoyproxy/ratelimit's default)" },
  'tracing-service-namespace': { env: 'TRACING_SERVICE_NAMESPACE', default: '', help: 'service.namespace of the spans' },
  'tracing-service-instance-id': {
    env: 'TRACING_SERVICE_INSTANCE_ID',
    default: '',
    help: 'service.instance.id of the spans (unset: a random UUID per process)',
  },
  'tracing-sampling-rate': {
    env: 'TRACING_SAMPLING_RATE',
    default: '1',
    help: "share of traces started here that are sampled, 0-1; a caller's choice is followed",
  },
  'tracing-queue-size': { env: 'OTEL_BSP_MAX_QUEUE_SIZE', default: '2048', help: 'most spans held for export; past it spans are dropped and counted' },
  'tracing-batch-size': { env: 'OTEL_BSP_MAX_EXPORT_BATCH_SIZE', default: '512', help: 'most spans in one export' },
  'tracing-schedule-delay-ms': { env: 'OTEL_BSP_SCHEDULE_DELAY', default: '5000', help: 'longest wait before queued spans are sent' },
  'tracing-export-timeout-ms': { env: 'OTEL_BSP_EXPORT_TIMEOUT', default: '30000', help: 'longest wait for one export' },
  'decision-log': { env: 'DECISION_LOG', default: 'off', help: 'a log line per decision, whatever --log-level: off | over (429s only) | all' },
  'decision-log-max-per-second': {
    env: 'DECISION_LOG_MAX_PER_SECOND',
    default: '1000',
    help: 'most decision lines a second; the rest are dropped and counted',
  },
} as const;

export type OptionName = keyof typeof SERVE_OPTIONS;

/** Every environment variable of the table above, for tests that hold settings to envoyproxy/ratelimit's. */
export const SERVE_ENV_NAMES: readonly string[] = Object.values(SERVE_OPTIONS).map((o) => o.env);

/** A setting's default as help and docs/cli.md say it: an empty default is no value at all, not an empty one. */
export const defaultText = (value: string): string => (value === '' ? 'unset' : value);

export function serveHelp(): string {
  const width = Math.max(...Object.keys(SERVE_OPTIONS).map((f) => f.length));
  const rows = Object.entries(SERVE_OPTIONS).map(
    ([flag, o]) => `  --${flag.padEnd(width)} ${o.help}\n  ${''.padEnd(width + 2)} env ${o.env}, default ${defaultText(o.default)}`,
  );
  return (
    `Usage: tollgate serve [options]\n\nRuns the rate-limit service.\n\nOptions (flags win over ` +
    `environment):\n${rows.join('\n')}\n\nEnvironment only:\n  TOLLGATE_ADMIN_TOKEN   enables the admin API on --admin-port (Authorization: ` +
    `Bearer <it>)\n`
  );
}
