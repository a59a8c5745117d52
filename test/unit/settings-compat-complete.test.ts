import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { unsupportedSettings } from '../../src/settings-compat.js';
import { parseServeArgs, SERVE_ENV_NAMES } from '../../src/settings.js';

/** Every variable envoyproxy/ratelimit reads (test/fixtures/ratelimit-settings.txt) is either read by
 * Tollgate with the same meaning, or named in the start-up warning when set to something else than what
 * Tollgate already does: none is ignored silently. */
const ENVOY = readFileSync('test/fixtures/ratelimit-settings.txt', 'utf8')
  .split('\n')
  .filter((l) => l && !l.startsWith('#'))
  .map((l) => l.split(' ')[0]!);

/** Read by Tollgate besides its own table of settings (settings-compat.ts, the Redis URL and the config path). */
const READ_ELSEWHERE = ['REDIS_SENTINEL_AUTH', 'REDIS_AUTH', 'REDIS_TLS', 'REDIS_SOCKET_TYPE', 'RUNTIME_ROOT', 'RUNTIME_SUBDIRECTORY', 'RUNTIME_APPDIRECTORY', 'CACHE_KEY_PREFIX'];

describe("envoyproxy/ratelimit's settings", () => {
  it('the fact list is there and long', () => {
    expect(ENVOY.length).toBeGreaterThan(100);
  });

  it.each(ENVOY)('%s is read or warned about', (name) => {
    const read = SERVE_ENV_NAMES.includes(name) || READ_ELSEWHERE.includes(name);
    if (read) return;
    // A value no default has: "on" for booleans would parse as neither; any text works for a name check.
    expect(unsupportedSettings({ [name]: 'tollgate-test-value' })).toEqual([name]);
  });

  it('REDIS_URL without BACKEND_TYPE chooses the Redis store, as envoyproxy/ratelimit (whose default backend is redis) would', () => {
    const s = parseServeArgs([], { REDIS_URL: '127.0.0.1:6380' });
    expect(s.store).toBe('redis');
    expect(s.storeInferredFrom).toEqual(['REDIS_URL']);
    expect(s.redis).toBeDefined();
    expect(parseServeArgs([], { REDIS_URL: '127.0.0.1:6380', BACKEND_TYPE: 'memory' }).store).toBe('memory');
    expect(parseServeArgs(['--store', 'memory'], { REDIS_URL: '127.0.0.1:6380' }).store).toBe('memory');
    const none = parseServeArgs([], {});
    expect([none.store, none.storeInferredFrom]).toEqual(['memory', undefined]); // npm start stays in memory
  });

  it('QUOTA_MODE, RESPONSE_DYNAMIC_METADATA and MERGE_DOMAIN_CONFIG are read, not warned about', () => {
    const env = { QUOTA_MODE: 'true', RESPONSE_DYNAMIC_METADATA: 'true', MERGE_DOMAIN_CONFIG: 'true' };
    const s = parseServeArgs([], env);
    expect([s.quotaMode, s.responseDynamicMetadata, s.mergeDomainConfig, s.unsupported]).toEqual([true, true, true, []]);
  });
});
