import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { logSettingNotes } from '../../src/service.js';
import { READ_BY_COMPAT } from '../../src/settings/compat.js';
import { parseServeArgs, SERVE_ENV_NAMES, serveHelp } from '../../src/settings/settings.js';

/** Every variable envoyproxy/ratelimit reads (test/fixtures/ratelimit-settings.txt, from its settings.go) is
 * either read by Tollgate with the same meaning, or named in the start-up warning when set to something
 * Tollgate does not do: none is ignored silently. */
const ENVOY = readFileSync('test/fixtures/ratelimit-settings.txt', 'utf8')
  .split('\n')
  .filter((l) => l.trim() && !l.startsWith('#'))
  .map((l) => {
    const [name, ...rest] = l.split(' ');
    return { name: name!, default: rest.join(' ').trim() };
  });

const READ = new Set([...SERVE_ENV_NAMES, ...READ_BY_COMPAT]);
const read = ENVOY.filter((v) => READ.has(v.name));
const unread = ENVOY.filter((v) => !READ.has(v.name));

/** What Tollgate does whatever the variable says, when that is the variable's non-default value: set to it, no
 * warning; set to its default (which Tollgate does not do), a warning. */
const TOLLGATE_DOES_NON_DEFAULT: Record<string, string> = {
  USE_STATSD: 'false', // no StatsD
  RUNTIME_IGNOREDOTFILES: 'true', // dot entries are skipped (src/config/load.ts)
};

/** What Tollgate does whatever the variable says, when that is the default: set to the default, no warning. */
const TOLLGATE_DOES_DEFAULT = [
  'RUNTIME_WATCH_ROOT',
  'HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED',
  'USE_DOG_STATSD',
  'DISABLE_STATS',
  'REDIS_HEALTH_CHECK_ACTIVE_CONNECTION',
  'REDIS_PERSECOND',
];

/** A value other than the default: a boolean's opposite, else text no default has. */
const nonDefault = (d: string): string => (d === 'true' ? 'false' : d === 'false' ? 'true' : 'tollgate-test-value');

const warned = (env: NodeJS.ProcessEnv): string[] => parseServeArgs([], env).unsupported;

/** For each variable Tollgate says it reads: an environment without it, and a value that must change what
 * parseServeArgs returns (or make it refuse), so that "read" is never only a name on a list. */
const XDS = { CONFIG_TYPE: 'GRPC_XDS_SOTW' };
const TRACING = { TRACING_ENABLED: 'true' };
const REDIS_TLS = { BACKEND_TYPE: 'redis', REDIS_TLS: 'true' };
const READ_SAMPLES: Record<string, { base?: NodeJS.ProcessEnv; value: string }> = {
  HOST: { value: '127.0.0.2' },
  PORT: { value: '9999' },
  GRPC_HOST: { value: '127.0.0.2' },
  GRPC_PORT: { value: '9998' },
  LOG_LEVEL: { value: 'DEBUG' },
  LOG_FORMAT: { value: 'text' },
  NEAR_LIMIT_RATIO: { value: '0.5' },
  SHADOW_MODE: { value: 'true' },
  QUOTA_MODE: { value: 'true' },
  STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: { value: 'false' },
  RESPONSE_DYNAMIC_METADATA: { value: 'true' },
  MERGE_DOMAIN_CONFIG: { value: 'true' },
  RUNTIME_ROOT: { value: '/srv/runtime' },
  RUNTIME_SUBDIRECTORY: { base: { RUNTIME_ROOT: '/srv/runtime' }, value: 'ratelimit' },
  RUNTIME_APPDIRECTORY: { base: { RUNTIME_ROOT: '/srv/runtime' }, value: 'limits' },
  CACHE_KEY_PREFIX: { value: 'rl_' },
  BACKEND_TYPE: { value: 'redis' },
  REDIS_URL: { base: { BACKEND_TYPE: 'redis' }, value: 'redis.internal:6380' },
  REDIS_TYPE: { base: { BACKEND_TYPE: 'redis', REDIS_URL: 'a:7000,b:7001' }, value: 'CLUSTER' },
  REDIS_AUTH: { base: { BACKEND_TYPE: 'redis' }, value: 's3cr3t' },
  REDIS_TLS: { base: { BACKEND_TYPE: 'redis' }, value: 'true' },
  REDIS_SOCKET_TYPE: { base: { BACKEND_TYPE: 'redis', REDIS_URL: 'r:6379' }, value: 'unix' },
  REDIS_SENTINEL_AUTH: { value: 's3cr3t' },
  REDIS_PIPELINE_WINDOW: { value: '2ms' },
  REDIS_PIPELINE_LIMIT: { base: { REDIS_PIPELINE_WINDOW: '2ms' }, value: '64' },
  CONFIG_TYPE: { value: 'GRPC_XDS_SOTW' },
  // Files are checked readable at start: a path that is not there is refused, naming the variable.
  GRPC_SERVER_USE_TLS: { value: 'true' },
  GRPC_SERVER_TLS_CERT: { base: { GRPC_SERVER_USE_TLS: 'true' }, value: '/nonexistent/cert.pem' },
  GRPC_SERVER_TLS_KEY: { base: { GRPC_SERVER_USE_TLS: 'true', GRPC_SERVER_TLS_CERT: 'package.json' }, value: '/nonexistent/key.pem' },
  GRPC_CLIENT_TLS_CACERT: {
    base: { GRPC_SERVER_USE_TLS: 'true', GRPC_SERVER_TLS_CERT: 'package.json', GRPC_SERVER_TLS_KEY: 'package.json' },
    value: '/nonexistent/ca.pem',
  },
  FORCE_START_WITHOUT_INITIAL_CONFIG: { value: 'true' },
  CONFIG_GRPC_XDS_SERVER_URL: { base: XDS, value: 'eg.internal:18001' },
  CONFIG_GRPC_XDS_NODE_ID: { base: XDS, value: 'ratelimit' },
  CONFIG_GRPC_XDS_NODE_METADATA: { base: XDS, value: 'a=b' },
  CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: { base: XDS, value: 'authorization:Bearer x' },
  CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL: { base: XDS, value: '5s' },
  CONFIG_GRPC_XDS_SERVER_USE_TLS: { base: XDS, value: 'true' },
  // A file that is not there stops the start, naming the variable: read.
  CONFIG_GRPC_XDS_CLIENT_TLS_CERT: { base: { ...XDS, CONFIG_GRPC_XDS_SERVER_USE_TLS: 'true' }, value: '/nonexistent/cert.pem' },
  CONFIG_GRPC_XDS_CLIENT_TLS_KEY: { base: { ...XDS, CONFIG_GRPC_XDS_SERVER_USE_TLS: 'true' }, value: '/nonexistent/key.pem' },
  CONFIG_GRPC_XDS_SERVER_TLS_CACERT: { base: { ...XDS, CONFIG_GRPC_XDS_SERVER_USE_TLS: 'true' }, value: '/nonexistent/ca.pem' },
  CONFIG_GRPC_XDS_SERVER_TLS_SAN: { base: XDS, value: 'xds.internal' },
  XDS_CLIENT_BACKOFF_INITIAL_INTERVAL: { base: XDS, value: '1s' },
  XDS_CLIENT_BACKOFF_MAX_INTERVAL: { base: XDS, value: '2m' },
  XDS_CLIENT_BACKOFF_RANDOM_FACTOR: { base: XDS, value: '0.5' },
  XDS_CLIENT_BACKOFF_JITTER: { base: XDS, value: 'false' },
  XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES: { base: XDS, value: '1048576' },
  USE_PROMETHEUS: { value: 'true' },
  PROMETHEUS_ADDR: { base: { USE_PROMETHEUS: 'true' }, value: ':19001' },
  PROMETHEUS_PATH: { base: { USE_PROMETHEUS: 'true' }, value: '/stats' },
  LIMIT_RESPONSE_HEADERS_ENABLED: { value: 'true' },
  LIMIT_LIMIT_HEADER: { value: 'X-RateLimit-Limit' },
  LIMIT_REMAINING_HEADER: { value: 'X-RateLimit-Remaining' },
  LIMIT_RESET_HEADER: { value: 'X-RateLimit-Reset' },
  LIMIT_REQUEST_HEADERS_ENABLED: { value: 'true' },
  LIMIT_REQUEST_LIMIT_HEADER: { base: { LIMIT_REQUEST_HEADERS_ENABLED: 'true' }, value: 'X-Quota-Limit' },
  LIMIT_REQUEST_REMAINING_HEADER: { base: { LIMIT_REQUEST_HEADERS_ENABLED: 'true' }, value: 'X-Quota-Remaining' },
  LIMIT_REQUEST_RESET_HEADER: { base: { LIMIT_REQUEST_HEADERS_ENABLED: 'true' }, value: 'X-Quota-Reset' },
  // Read with TLS to Redis; a file that is not there stops the start, naming the variable.
  REDIS_TLS_CLIENT_CERT: { base: REDIS_TLS, value: '/nonexistent/cert.pem' },
  REDIS_TLS_CLIENT_KEY: { base: { ...REDIS_TLS, REDIS_TLS_CLIENT_CERT: 'package.json' }, value: '/nonexistent/key.pem' },
  REDIS_TLS_CACERT: { base: REDIS_TLS, value: '/nonexistent/ca.pem' },
  REDIS_TLS_SKIP_HOSTNAME_VERIFICATION: { base: REDIS_TLS, value: 'true' },
  TRACING_ENABLED: { value: 'true' },
  TRACING_SERVICE_NAME: { base: TRACING, value: 'ratelimit-prod' },
  TRACING_SERVICE_NAMESPACE: { base: TRACING, value: 'payments' },
  TRACING_SERVICE_INSTANCE_ID: { base: TRACING, value: 'pod-1' },
  TRACING_EXPORTER_PROTOCOL: { base: TRACING, value: 'grpc' },
  TRACING_SAMPLING_RATE: { base: TRACING, value: '0.01' },
};

function outcome(env: NodeJS.ProcessEnv): unknown {
  try {
    return { settings: parseServeArgs([], env) };
  } catch (err) {
    return { refused: (err as Error).message };
  }
}

describe("envoyproxy/ratelimit's settings, every one", () => {
  it('the fact list is there and whole', () => {
    expect(ENVOY.length).toBeGreaterThanOrEqual(114);
    expect(new Set(ENVOY.map((v) => v.name)).size).toBe(ENVOY.length);
    for (const name of [...Object.keys(TOLLGATE_DOES_NON_DEFAULT), ...TOLLGATE_DOES_DEFAULT]) expect(unread.map((v) => v.name)).toContain(name);
  });

  it.each(read.map((v) => v.name))('%s is read: setting it changes the settings', (name) => {
    const sample = READ_SAMPLES[name];
    expect(sample, `READ_SAMPLES has no value for ${name}`).toBeDefined();
    const base = sample!.base ?? {};
    expect(base[name]).toBeUndefined();
    const after = outcome({ ...base, [name]: sample!.value });
    expect(after).not.toEqual(outcome(base));
    if ('settings' in (after as object)) expect((after as { settings: { unsupported: string[] } }).settings.unsupported).toEqual([]);
  });

  it.each(unread)('$name, not read, is warned about when set to a value other than its default ($default)', ({ name, default: d }) => {
    const value = nonDefault(d);
    if (TOLLGATE_DOES_NON_DEFAULT[name] !== undefined) {
      expect(TOLLGATE_DOES_NON_DEFAULT[name]).toBe(value);
      expect(warned({ [name]: value })).toEqual([]);
      expect(warned({ [name]: value.toUpperCase() })).toEqual([]);
    } else {
      expect(warned({ [name]: value })).toEqual([name]);
    }
  });

  it.each(unread.filter((v) => v.default !== ''))(
    '$name, not read, set to its default ($default): warned unless Tollgate does that',
    ({ name, default: d }) => {
      const doesDefault = TOLLGATE_DOES_DEFAULT.includes(name);
      expect(warned({ [name]: d })).toEqual(doesDefault ? [] : [name]);
    },
  );

  it('a variable set to nothing is unset: no warning (a manifest\'s NAME: "")', () => {
    expect(warned(Object.fromEntries(unread.map((v) => [v.name, ''])))).toEqual([]);
  });

  it('several at once: one sorted list of names, never values', () => {
    const s = parseServeArgs([], {
      USE_STATSD: 'true',
      STATSD_HOST: 'statsd.internal',
      MEMCACHE_HOST_PORT: 'm:11211',
      REDIS_PERSECOND_URL: 'r2:6379',
      PATH: '/usr/bin',
    });
    expect(s.unsupported).toEqual(['MEMCACHE_HOST_PORT', 'REDIS_PERSECOND_URL', 'STATSD_HOST', 'USE_STATSD']);
  });

  it("docs/migration.md's table of envoyproxy/ratelimit's settings has a row for each (by name, or by its family's NAME_*)", () => {
    const section = readFileSync('docs/migration.md', 'utf8');
    const families = [...section.matchAll(/`([A-Z0-9_]+_)\*`/g)].map((m) => m[1]!);
    const rows = section.split('\n').filter((l) => l.startsWith('| `'));
    const missing = ENVOY.map((v) => v.name).filter((n) => !rows.some((r) => r.includes(`\`${n}\``)) && !families.some((f) => n.startsWith(f)));
    expect(missing).toEqual([]);
  });

  it("DOG_STATSD_MOGRIFIER_<name>_*, read by envoyproxy/ratelimit's godogstats outside settings.go, is warned about too", () => {
    expect(warned({ DOG_STATSD_MOGRIFIER_HTTP_PATTERN: '^x$', DOG_STATSD_MOGRIFIER_HTTP_NAME: 'y' })).toEqual([
      'DOG_STATSD_MOGRIFIER_HTTP_NAME',
      'DOG_STATSD_MOGRIFIER_HTTP_PATTERN',
    ]);
  });
});

describe("no store chosen, but envoyproxy/ratelimit's Redis variables set", () => {
  it('REDIS_URL without BACKEND_TYPE chooses the Redis store, as envoyproxy/ratelimit (whose default backend is redis) would', () => {
    const s = parseServeArgs([], { REDIS_URL: '127.0.0.1:6380' });
    expect(s.store).toBe('redis');
    expect(s.storeInferredFrom).toEqual(['REDIS_URL']);
    expect(s.redis).toMatchObject({ nodes: [{ host: '127.0.0.1', port: 6380 }] });
  });

  it('any of REDIS_URL, REDIS_SOCKET_TYPE, REDIS_TYPE, REDIS_AUTH, REDIS_TLS; the names in a fixed order', () => {
    for (const name of ['REDIS_URL', 'REDIS_TYPE', 'REDIS_AUTH', 'REDIS_TLS']) {
      const value = { REDIS_URL: 'r:6379', REDIS_TYPE: 'SINGLE', REDIS_AUTH: 'pw', REDIS_TLS: 'true' }[name]!;
      expect(parseServeArgs([], { [name]: value })).toMatchObject({ store: 'redis', storeInferredFrom: [name] });
    }
    expect(parseServeArgs([], { REDIS_SOCKET_TYPE: 'tcp' })).toMatchObject({ store: 'redis', storeInferredFrom: ['REDIS_SOCKET_TYPE'] });
    expect(parseServeArgs([], { REDIS_TLS: 'true', REDIS_AUTH: 'pw', REDIS_URL: 'r:6379', REDIS_SOCKET_TYPE: 'tcp' }).storeInferredFrom).toEqual([
      'REDIS_URL',
      'REDIS_SOCKET_TYPE',
      'REDIS_AUTH',
      'REDIS_TLS',
    ]);
    // envoyproxy/ratelimit's default socket type is unix, which Tollgate cannot reach: refused by name.
    expect(() => parseServeArgs([], { REDIS_SOCKET_TYPE: 'unix', REDIS_URL: '/var/run/nutcracker/ratelimit.sock' })).toThrow(/^REDIS_SOCKET_TYPE must be tcp/);
  });

  it('BACKEND_TYPE or --store still choose; set to nothing, BACKEND_TYPE is unset; nothing set keeps memory (npm start)', () => {
    expect(parseServeArgs([], { REDIS_URL: 'r:6379', BACKEND_TYPE: 'memory' })).toMatchObject({ store: 'memory', storeInferredFrom: undefined });
    expect(parseServeArgs(['--store', 'memory'], { REDIS_URL: 'r:6379' })).toMatchObject({ store: 'memory', storeInferredFrom: undefined });
    expect(parseServeArgs([], { REDIS_URL: 'r:6379', BACKEND_TYPE: 'redis' })).toMatchObject({ store: 'redis', storeInferredFrom: undefined });
    expect(parseServeArgs([], { REDIS_URL: 'r:6379', BACKEND_TYPE: '' })).toMatchObject({ store: 'redis', storeInferredFrom: ['REDIS_URL'] });
    expect(parseServeArgs([], { REDIS_URL: '' })).toMatchObject({ store: 'memory', storeInferredFrom: undefined });
    expect(parseServeArgs([], {})).toMatchObject({ store: 'memory', storeInferredFrom: undefined, redis: undefined });
    // Other Redis settings (Tollgate's own, or sentinel auth) do not choose a store.
    expect(parseServeArgs([], { REDIS_SENTINEL_AUTH: 'pw', REDIS_KEY_PREFIX: 'x:' }).store).toBe('memory');
  });

  it('start-up says so in one info line naming the variables, never their values', () => {
    const lines: { level: string; obj: unknown; msg: string }[] = [];
    const logger = {
      info: (obj: unknown, msg: string) => lines.push({ level: 'info', obj, msg }),
      warn: (obj: unknown, msg: string) => lines.push({ level: 'warn', obj, msg }),
    };
    logSettingNotes(parseServeArgs([], { REDIS_URL: 'redis-host.internal:6380', REDIS_AUTH: 'hunter2-secret', REDIS_SOCKET_TYPE: 'tcp' }), logger as never);
    expect(lines).toHaveLength(1);
    expect(lines[0]!.level).toBe('info');
    expect(lines[0]!.msg).toMatch(/^store: redis, since REDIS_URL, REDIS_SOCKET_TYPE, REDIS_AUTH are set and BACKEND_TYPE is not/);
    expect(lines[0]!.obj).toEqual({ store: 'redis', from: ['REDIS_URL', 'REDIS_SOCKET_TYPE', 'REDIS_AUTH'] });
    expect(JSON.stringify(lines)).not.toMatch(/hunter2|redis-host|6380/);

    lines.length = 0;
    logSettingNotes(parseServeArgs([], {}), logger as never);
    expect(lines).toEqual([]);
  });
});

describe('QUOTA_MODE, RESPONSE_DYNAMIC_METADATA, MERGE_DOMAIN_CONFIG', () => {
  const fields = (s: ReturnType<typeof parseServeArgs>) => [s.quotaMode, s.responseDynamicMetadata, s.mergeDomainConfig];

  it('are off by default', () => {
    expect(fields(parseServeArgs([], {}))).toEqual([false, false, false]);
  });

  it('are read from the environment (true/false/1/0/yes/no, any case), not warned about', () => {
    const s = parseServeArgs([], { QUOTA_MODE: 'true', RESPONSE_DYNAMIC_METADATA: 'TRUE', MERGE_DOMAIN_CONFIG: '1' });
    expect([...fields(s), s.unsupported]).toEqual([true, true, true, []]);
    expect(fields(parseServeArgs([], { QUOTA_MODE: 'false', RESPONSE_DYNAMIC_METADATA: 'no', MERGE_DOMAIN_CONFIG: '' }))).toEqual([false, false, false]);
  });

  it('flags of the same names win over the environment', () => {
    const s = parseServeArgs(['--quota-mode', 'true', '--response-dynamic-metadata', 'true', '--merge-domain-config', 'yes'], {});
    expect(fields(s)).toEqual([true, true, true]);
    const env = { QUOTA_MODE: 'true', RESPONSE_DYNAMIC_METADATA: 'true', MERGE_DOMAIN_CONFIG: 'true' };
    expect(fields(parseServeArgs(['--quota-mode', 'false', '--response-dynamic-metadata', 'false', '--merge-domain-config', 'false'], env))).toEqual([
      false,
      false,
      false,
    ]);
  });

  it('--help names each flag, its variable and its default', () => {
    const help = serveHelp();
    for (const [flag, env] of [
      ['quota-mode', 'QUOTA_MODE'],
      ['response-dynamic-metadata', 'RESPONSE_DYNAMIC_METADATA'],
      ['merge-domain-config', 'MERGE_DOMAIN_CONFIG'],
    ]) {
      expect(help).toMatch(new RegExp(`--${flag} +\\S[^\\n]*\\n +env ${env}, default false\\n`));
    }
  });

  it('anything else is refused, naming where it came from', () => {
    expect(() => parseServeArgs([], { QUOTA_MODE: 'on' })).toThrow('QUOTA_MODE must be true or false (got "on")');
    expect(() => parseServeArgs(['--response-dynamic-metadata', 'sure'], {})).toThrow('--response-dynamic-metadata must be true or false (got "sure")');
    expect(() => parseServeArgs([], { MERGE_DOMAIN_CONFIG: '2' })).toThrow('MERGE_DOMAIN_CONFIG must be true or false (got "2")');
  });
});
