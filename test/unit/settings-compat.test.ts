import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { textLine } from '../../src/logger.js';
import { logSettingNotes } from '../../src/service.js';
import { parseServeArgs, type SettingsError } from '../../src/settings/settings.js';

// envoyproxy/ratelimit's settings, read where Tollgate means the same thing.
const redisOf = (env: NodeJS.ProcessEnv) => parseServeArgs([], { BACKEND_TYPE: 'redis', ...env }).redis!;

describe('moving from envoyproxy/ratelimit: Redis settings', () => {
  it('REDIS_URL in its host:port form', () => {
    expect(redisOf({ REDIS_URL: 'redis.internal:6380' })).toMatchObject({
      type: 'single',
      nodes: [{ host: 'redis.internal', port: 6380 }],
      tls: false,
      password: undefined,
    });
  });

  it('REDIS_AUTH as a password, or user:password; REDIS_TLS turns TLS on', () => {
    expect(redisOf({ REDIS_URL: 'r:6379', REDIS_AUTH: 'p@ss:w/rd' })).toMatchObject({ username: 'p@ss', password: 'w/rd' });
    expect(redisOf({ REDIS_URL: 'r:6379', REDIS_AUTH: 's3cr3t' })).toMatchObject({ username: undefined, password: 's3cr3t' });
    expect(redisOf({ REDIS_URL: 'r:6379', REDIS_TLS: 'true' }).tls).toBe(true);
    expect(redisOf({ REDIS_URL: 'redis://r:6379', REDIS_TLS: 'true', REDIS_AUTH: 'pw' })).toMatchObject({ tls: true, password: 'pw' });
  });

  it("REDIS_TYPE in any case; cluster seeds and sentinel's master,sentinel,… list", () => {
    expect(redisOf({ REDIS_TYPE: 'CLUSTER', REDIS_URL: 'a:7000,b:7001' })).toMatchObject({
      type: 'cluster',
      nodes: [
        { host: 'a', port: 7000 },
        { host: 'b', port: 7001 },
      ],
    });
    expect(redisOf({ REDIS_TYPE: 'SENTINEL', REDIS_URL: 'mymaster,s1:26379,s2:26380' })).toMatchObject({
      type: 'sentinel',
      masterName: 'mymaster',
      nodes: [
        { host: 's1', port: 26379 },
        { host: 's2', port: 26380 },
      ],
    });
  });

  it('REDIS_SOCKET_TYPE tcp is accepted, unix refused by name; credentials twice refused without echoing them', () => {
    expect(redisOf({ REDIS_URL: 'r:1', REDIS_SOCKET_TYPE: 'TCP' }).nodes).toEqual([{ host: 'r', port: 1 }]);
    expect(() => redisOf({ REDIS_URL: '/var/run/r.sock', REDIS_SOCKET_TYPE: 'unix' })).toThrow(/^REDIS_SOCKET_TYPE must be tcp/);
    expect(() => redisOf({ REDIS_URL: 'just-a-host' })).toThrow('REDIS_URL must be a redis[s]:// URL or host:port (comma-separated for several nodes)');
    let message = '';
    try {
      redisOf({ REDIS_URL: 'redis://:inurl@r:1', REDIS_AUTH: 'inauth' });
    } catch (err) {
      message = (err as SettingsError).message;
    }
    expect(message).toMatch(/REDIS_AUTH is set and REDIS_URL holds credentials too/);
    expect(message).not.toMatch(/inurl|inauth/);
  });

  it('BACKEND_TYPE, REDIS_FAILURE_POLICY, LOG_FORMAT in any case', () => {
    const s = parseServeArgs([], { BACKEND_TYPE: 'REDIS', REDIS_URL: 'r:1', REDIS_FAILURE_POLICY: 'DENY', LOG_FORMAT: 'TEXT' });
    expect([s.store, s.redisFailure, s.logFormat]).toEqual(['redis', 'deny', 'text']);
  });
});

describe('moving from envoyproxy/ratelimit: other settings', () => {
  it('RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config is the config directory; RUNTIME_CONFIG_DIR and --config win', () => {
    expect(parseServeArgs([], { RUNTIME_ROOT: '/data', RUNTIME_SUBDIRECTORY: 'ratelimit' }).configDir).toBe(join('/data', 'ratelimit', 'config'));
    expect(parseServeArgs([], { RUNTIME_ROOT: '/data', RUNTIME_SUBDIRECTORY: 'rl', RUNTIME_APPDIRECTORY: 'limits' }).configDir).toBe(
      join('/data', 'rl', 'limits'),
    );
    expect(parseServeArgs([], { RUNTIME_ROOT: '/data', RUNTIME_CONFIG_DIR: '/mine' }).configDir).toBe('/mine');
    expect(parseServeArgs(['--config', '/flag'], { RUNTIME_ROOT: '/data' }).configDir).toBe('/flag');
  });

  it('LOG_LEVEL in logrus spellings (WARN, warning, DEBUG); an unknown level lists the valid ones', () => {
    expect(parseServeArgs([], { LOG_LEVEL: 'WARN' }).logLevel).toBe('warn');
    expect(parseServeArgs([], { LOG_LEVEL: 'warning' }).logLevel).toBe('warn');
    expect(parseServeArgs([], { LOG_LEVEL: 'DEBUG' }).logLevel).toBe('debug');
    expect(() => parseServeArgs([], { LOG_LEVEL: 'loud' })).toThrow('LOG_LEVEL must be one of trace, debug, info, warn, error, fatal, silent (got "loud")');
  });

  it('CACHE_KEY_PREFIX is the key prefix unless REDIS_KEY_PREFIX is set', () => {
    expect(parseServeArgs([], { CACHE_KEY_PREFIX: 'rl_' }).redisKeyPrefix).toBe('rl_');
    expect(parseServeArgs([], { CACHE_KEY_PREFIX: 'rl_', REDIS_KEY_PREFIX: 'tg:' }).redisKeyPrefix).toBe('tg:');
    // envoyproxy/ratelimit's default, written out: unset, so Tollgate's keys keep their namespace.
    expect(parseServeArgs([], { CACHE_KEY_PREFIX: '' }).redisKeyPrefix).toBe('tollgate:');
  });

  it('settings Tollgate does not act on are listed by name, unless set to what Tollgate does anyway', () => {
    const s = parseServeArgs([], {
      USE_STATSD: 'true',
      STATSD_HOST: 'statsd',
      MEMCACHE_HOST_PORT: 'm:11211',
      PROMETHEUS_MAPPER_YAML: '/etc/statsd-exporter/conf.yaml',
      USE_DOG_STATSD: 'false',
      STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: 'true',
      CONFIG_TYPE: 'FILE',
      PATH: '/usr/bin',
    });
    expect(s.unsupported).toEqual(['MEMCACHE_HOST_PORT', 'PROMETHEUS_MAPPER_YAML', 'STATSD_HOST', 'USE_STATSD']);
    expect(s.unneeded).toEqual(['USE_DOG_STATSD']);
    expect(parseServeArgs([], { USE_STATSD: 'false' })).toMatchObject({ unsupported: [], unneeded: ['USE_STATSD'] });
  });

  it("Envoy Gateway's environment: the config directory's variables are not needed under xDS, and said so in the same line", () => {
    const env = {
      RUNTIME_ROOT: '/data',
      RUNTIME_SUBDIRECTORY: 'ratelimit',
      RUNTIME_IGNOREDOTFILES: 'true',
      RUNTIME_WATCH_ROOT: 'false',
      USE_STATSD: 'false',
      CONFIG_TYPE: 'GRPC_XDS_SOTW',
      PROMETHEUS_MAPPER_YAML: '/etc/statsd-exporter/conf.yaml',
      LOCAL_CACHE_SIZE_IN_BYTES: '0',
    };
    const s = parseServeArgs([], env);
    expect(s).toMatchObject({
      unsupported: ['LOCAL_CACHE_SIZE_IN_BYTES', 'PROMETHEUS_MAPPER_YAML'],
      unneeded: ['RUNTIME_IGNOREDOTFILES', 'RUNTIME_ROOT', 'RUNTIME_SUBDIRECTORY', 'RUNTIME_WATCH_ROOT', 'USE_STATSD'],
    });
    const lines: { level: string; obj: unknown; msg: string }[] = [];
    const logger = {
      info: (obj: unknown, msg: string) => lines.push({ level: 'info', obj, msg }),
      warn: (obj: unknown, msg: string) => lines.push({ level: 'warn', obj, msg }),
    };
    logSettingNotes(s, logger as never);
    expect(lines).toHaveLength(1);
    expect(lines[0]!.level).toBe('warn');
    expect(lines[0]!.msg).toBe(
      "envoyproxy/ratelimit settings Tollgate does not support are ignored: LOCAL_CACHE_SIZE_IN_BYTES (LOCAL_CACHE=false turns Tollgate's " +
        "over-limit cache off, as 0 does there), PROMETHEUS_MAPPER_YAML (the metrics keep Tollgate's names); not needed (set to what Tollgate " +
        'does anyway, or a config directory, which xDS replaces): RUNTIME_IGNOREDOTFILES, RUNTIME_ROOT, RUNTIME_SUBDIRECTORY, RUNTIME_WATCH_ROOT, USE_STATSD',
    );
    // With files, RUNTIME_ROOT and RUNTIME_SUBDIRECTORY are the config directory: read, not listed.
    const files = parseServeArgs([], { ...env, CONFIG_TYPE: 'FILE' });
    expect(files.configDir).toBe(join('/data', 'ratelimit', 'config'));
    expect(files.unneeded).toEqual(['RUNTIME_IGNOREDOTFILES', 'USE_STATSD']);
    expect(files.unsupported).toEqual(['LOCAL_CACHE_SIZE_IN_BYTES', 'PROMETHEUS_MAPPER_YAML', 'RUNTIME_WATCH_ROOT']);
  });

  it('LOG_FORMAT=text writes one readable line per event', () => {
    expect(textLine('{"level":"warn","time":0,"service":"tollgate","msg":"redis store degraded","reason":"connection closed","n":3}')).toBe(
      '1970-01-01T00:00:00.000Z WARN redis store degraded reason="connection closed" n=3\n',
    );
    expect(textLine('{"level":50,"time":0,"msg":"older line"}')).toBe('1970-01-01T00:00:00.000Z ERROR older line\n');
  });
});

describe('an environment variable set to nothing', () => {
  it('is unset: the default applies (a manifest line `GRPC_PORT=` or `value: ""` does not fail the start)', () => {
    const s = parseServeArgs([], { GRPC_PORT: '', PORT: '', REDIS_TIMEOUT_MS: '', SHADOW_MODE: '' });
    expect({ grpc: s.grpcPort, http: s.httpPort, timeout: s.redisTimeoutMs, shadow: s.shadowMode }).toEqual({
      grpc: 8081,
      http: 8080,
      timeout: 25,
      shadow: false,
    });
  });
});

describe('moving from envoyproxy/ratelimit: tracing', () => {
  it('TRACING_* as its src/trace/trace.go reads them: http is OTLP/HTTP protobuf, sampling from 0 to 1', () => {
    expect(parseServeArgs([], {}).tracing).toBeUndefined();
    const t = parseServeArgs([], { TRACING_ENABLED: 'true' }).tracing!;
    expect(t).toMatchObject({ protocol: 'http/protobuf', serviceName: 'RateLimit', serviceNamespace: '', serviceInstanceId: '', samplingRate: 1 });
    expect(t.queue).toEqual({ maxQueueSize: 2048, maxExportBatchSize: 512, scheduledDelayMs: 5000, exportTimeoutMs: 30000 });
    expect(parseServeArgs([], { TRACING_ENABLED: 'true', TRACING_SAMPLING_RATE: '0' }).tracing!.samplingRate).toBe(0);
    expect(() => parseServeArgs([], { TRACING_ENABLED: 'true', TRACING_SAMPLING_RATE: '1.5' })).toThrow(/TRACING_SAMPLING_RATE must be a number from 0 to 1/);
    expect(() => parseServeArgs([], { TRACING_ENABLED: 'true', TRACING_EXPORTER_PROTOCOL: 'zipkin' })).toThrow(
      /TRACING_EXPORTER_PROTOCOL must be http, http\/protobuf, http\/json or grpc/,
    );
  });

  it('the standard OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL and OTEL_BSP_* apply when TRACING_* does not say', () => {
    const env = { TRACING_ENABLED: 'true', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc', OTEL_BSP_MAX_QUEUE_SIZE: '100' };
    expect(parseServeArgs([], env).tracing).toMatchObject({ protocol: 'grpc', queue: { maxQueueSize: 100 } });
    expect(parseServeArgs([], { ...env, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json' }).tracing!.protocol).toBe('http/json');
    expect(parseServeArgs([], { ...env, TRACING_EXPORTER_PROTOCOL: 'http' }).tracing!.protocol).toBe('http/protobuf');
  });

  it('DECISION_LOG is off, over or all, with a bound a second', () => {
    expect(parseServeArgs([], {}).decisionLog).toEqual({ mode: 'off', maxPerSecond: 1000 });
    expect(parseServeArgs(['--decision-log', 'OVER'], { DECISION_LOG_MAX_PER_SECOND: '50' }).decisionLog).toEqual({ mode: 'over', maxPerSecond: 50 });
    expect(() => parseServeArgs([], { DECISION_LOG: 'verbose' })).toThrow(/DECISION_LOG must be off, over or all/);
  });
});
