import * as grpc from '@grpc/grpc-js';
import { parseRedisUrl, type RedisConnection, type RedisType, RedisUrlError } from '../store/redis-connection.js';
import type { TracingOptions } from '../tracing/tracing.js';
import { VERSION } from '../version.js';
import type { XdsOptions } from '../xds/source.js';
import { parseBool, parsePairs, redisUrlFrom, SettingsError } from './compat.js';
import type { OptionName, Setting } from './table.js';
import { redisTlsFiles, xdsCredentials } from './tls.js';
import { choice, durationOf, numberOf } from './values.js';

/** The settings that gather several flags into one part's options: RLQS, tracing, the xDS client, Redis. */

export interface RlqsSettings {
  /** How often Envoy reports usage: whole seconds, as Envoy counts them (5 s, hard-coded in Envoy today). */
  reportIntervalMs: number;
  /** Most buckets one stream holds; a new one in use past it gets ALLOW_ALL with a TTL, no state kept. */
  maxBuckets: number;
  /** What a bucket no rule matches gets: ALLOW_ALL or DENY_ALL. */
  unmatched: 'allow' | 'deny';
  /** What all streams together may hold and spend (docs/rlqs.md "Bounds"). */
  process: { maxStreams: number; maxBuckets: number; cpuShare: number };
}

export function rlqsSettings(setting: (name: OptionName) => Setting): RlqsSettings {
  const interval = setting('rlqs-report-interval');
  const reportIntervalMs = durationOf(interval);
  if (reportIntervalMs < 1000 || reportIntervalMs % 1000 !== 0)
    throw new SettingsError(`${interval.from}: a whole number of seconds, at least 1s (Envoy reports and reads durations in seconds)`);
  return {
    reportIntervalMs,
    maxBuckets: numberOf(setting('rlqs-max-buckets'), 'positive'),
    unmatched: choice(setting('rlqs-unmatched'), ['allow', 'deny'] as const),
    process: {
      maxStreams: numberOf(setting('rlqs-max-streams'), 'positive'),
      maxBuckets: numberOf(setting('rlqs-max-buckets-total'), 'positive'),
      cpuShare: numberOf(setting('rlqs-cpu-share'), 'portion'),
    },
  };
}

/** envoyproxy/ratelimit's TRACING_* (src/settings/settings.go, src/trace/trace.go), and the batch
 * processor's standard OTEL_BSP_* variables. Its `http` is OTLP/HTTP with protobuf bodies (otlptracehttp). */
export function tracingOptions(setting: (name: OptionName) => Setting): Omit<TracingOptions, 'version'> {
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

/** Most xDS management servers one service takes configs from. */
export const MAX_XDS_SERVERS = 8;

/** One client per server of CONFIG_GRPC_XDS_SERVER_URL (comma-separated, or --xds-server-url given more than
 * once), each with the node ID and the TLS choice at its position in CONFIG_GRPC_XDS_NODE_ID and
 * CONFIG_GRPC_XDS_SERVER_USE_TLS; one value there serves every server (Envoy Gateway's server wants mTLS,
 * AI Gateway's is plaintext). The other xDS settings (TLS files, headers, backoff) are the same for all. */
export function xdsServers(setting: (name: OptionName) => Setting): XdsOptions[] {
  const list = (name: OptionName): string[] => {
    const s = setting(name);
    const parts = s.value.split(',').map((p) => p.trim());
    if (parts.some((p) => p === '')) throw new SettingsError(`${s.from} has an empty entry (got "${s.value.slice(0, 200)}")`);
    return parts;
  };
  const urls = list('xds-server-url');
  const from = setting('xds-server-url').from;
  if (urls.length > MAX_XDS_SERVERS) throw new SettingsError(`${from} names ${urls.length} servers, more than ${MAX_XDS_SERVERS}`);
  const paired = (name: OptionName, what: string): string[] => {
    // One server takes the value whole, as before lists: a node ID may hold a comma.
    if (urls.length === 1) return [setting(name).value];
    const values = list(name);
    if (values.length !== 1 && values.length !== urls.length)
      throw new SettingsError(
        `${from} and ${setting(name).from} are paired by position: ${urls.length} servers need ${urls.length} ${what}, ` +
          `or one for all (got ${values.length})`,
      );
    return urls.map((_, i) => values[i] ?? values[0]!);
  };
  const ids = paired('xds-node-id', 'node IDs');
  const tls = paired('xds-tls', 'TLS choices').map((v) => parseBool(v, setting('xds-tls').from));
  if (new Set(urls.map((u, i) => `${u}\n${ids[i]}`)).size !== urls.length)
    throw new SettingsError(`${setting('xds-server-url').from} and ${setting('xds-node-id').from} name the same server and node twice`);
  const common = xdsOptions(setting);
  const secure = tls.some(Boolean) ? xdsCredentials(setting) : undefined;
  return urls.map((target, i) => ({
    ...common,
    target,
    credentials: tls[i] ? secure! : grpc.credentials.createInsecure(),
    node: { ...common.node, id: ids[i]! },
  }));
}

/** The xDS client's settings, by envoyproxy/ratelimit's names (src/settings/settings.go); its TLS files are
 * read now, so a missing one stops the start with its variable named. */
function xdsOptions(setting: (name: OptionName) => Setting): Omit<XdsOptions, 'credentials'> {
  const text = (name: OptionName): string => setting(name).value;
  const ms = (name: OptionName): number => durationOf(setting(name));
  const factor = numberOf(setting('xds-backoff-factor'), 'above0');
  const headers = parsePairs(text('xds-headers'), ':');
  for (const name of Object.keys(headers)) {
    if (!/^[0-9a-z_.-]+$/i.test(name) || name.toLowerCase().endsWith('-bin'))
      throw new SettingsError(`${setting('xds-headers').from}: header names are letters, digits, "_", "." and "-" (one is not)`);
  }
  return {
    target: text('xds-server-url'),
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

/** The URL's errors never echo it: it may hold a password. The client's TLS files come with it (tls.ts). */
export function redisConnection(setting: (name: OptionName) => Setting, env: NodeJS.ProcessEnv): RedisConnection {
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
