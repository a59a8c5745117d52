import { describe, expect, it } from 'vitest';
import { parseServeArgs, SettingsError } from '../../src/settings/settings.js';
import { parseRedisUrl } from '../../src/store/redis-connection.js';

describe('Redis URL', () => {
  it('single: host, port, db, user and password, TLS with rediss', () => {
    expect(parseRedisUrl('rediss://app:p%40ss:word@cache.internal:6380/2', 'single')).toEqual({
      type: 'single',
      nodes: [{ host: 'cache.internal', port: 6380 }],
      username: 'app',
      password: 'p@ss:word',
      tls: true,
      db: 2,
      masterName: undefined,
    });
    expect(parseRedisUrl('redis://127.0.0.1', 'single').nodes).toEqual([{ host: '127.0.0.1', port: 6379 }]);
    expect(parseRedisUrl('redis://:onlypass@h:1', 'single')).toMatchObject({ username: undefined, password: 'onlypass' });
  });

  it('sentinel: the sentinels and the master name', () => {
    expect(parseRedisUrl('redis://s1:26379,s2/mymaster', 'sentinel')).toMatchObject({
      nodes: [
        { host: 's1', port: 26379 },
        { host: 's2', port: 26379 },
      ],
      masterName: 'mymaster',
    });
    expect(() => parseRedisUrl('redis://s1:26379', 'sentinel')).toThrow(/master name/);
  });

  it('cluster: seed nodes, no database', () => {
    expect(parseRedisUrl('redis://a:7000,b:7001,c:7002', 'cluster').nodes).toHaveLength(3);
    expect(() => parseRedisUrl('redis://a:7000/1', 'cluster')).toThrow(/no databases/);
  });

  it('errors never echo the password', () => {
    for (const [url, type] of [
      ['redis://u:hunter2@h:99999', 'single'],
      ['http://u:hunter2@h', 'single'],
      ['redis://u:hunter2@a,b', 'single'],
    ] as const) {
      let message = '';
      try {
        parseRedisUrl(url, type);
      } catch (err) {
        message = (err as Error).message;
      }
      expect(message).not.toBe('');
      expect(message).not.toContain('hunter2');
    }
  });

  it('settings parse it only for the redis store, and name the flag', () => {
    expect(parseServeArgs(['--redis-url', 'nonsense'], {}).redis).toBeUndefined();
    expect(() => parseServeArgs(['--store', 'redis', '--redis-url', 'nonsense'], {})).toThrow(SettingsError);
    expect(() => parseServeArgs(['--store', 'redis', '--redis-failure', 'maybe'], {})).toThrow(/allow, deny or local/);
    const s = parseServeArgs([], { BACKEND_TYPE: 'redis', REDIS_TYPE: 'CLUSTER', REDIS_URL: 'redis://a:1,b:2' });
    expect(s.redis?.type).toBe('cluster');
  });
});
