import { afterAll, beforeAll } from 'vitest';
import type { ManualClock } from '../../src/counters/clock.js';
import { MemoryStore } from '../../src/store/memory-store.js';
import { parseRedisUrl } from '../../src/store/redis-connection.js';
import { RedisStore } from '../../src/store/redis-store.js';
import type { Store } from '../../src/store/store.js';
import { type RedisCluster, type RedisServer, startRedis, startRedisCluster } from './redis.js';
import { silentLogger } from './service.js';

export type MakeStore = (clock: ManualClock) => Promise<Store>;

let prefixes = 0;

/** The stores a conformance suite runs on, each made fresh per test on the test's clock: memory, one Redis
 * and (with `cluster`) a 3-master Cluster, started before the file's tests and stopped after them. Call it at
 * a describe's top level. `redis()`: the one Redis, to look at its keys. */
export function everyStore(opts: { cluster?: boolean } = {}): { stores: [string, MakeStore][]; redis: () => RedisServer } {
  let redis: RedisServer | undefined;
  let cluster: RedisCluster | undefined;
  const opened: Store[] = [];
  beforeAll(async () => {
    [redis, cluster] = await Promise.all([startRedis(), opts.cluster ? startRedisCluster() : undefined]);
  });
  afterAll(async () => {
    for (const s of opened) await s.close();
    await Promise.all([redis?.stop(), cluster?.stop()]);
  });
  const redisStore = async (url: string, mode: 'single' | 'cluster', clock: ManualClock): Promise<Store> => {
    const s = new RedisStore({ connection: parseRedisUrl(url, mode), timeoutMs: 2000, keyPrefix: `conf${++prefixes}:`, logger: silentLogger, clock });
    opened.push(s);
    await s.waitReady(10_000);
    return s;
  };
  const stores: [string, MakeStore][] = [
    ['memory', async (clock) => new MemoryStore({ clock })],
    ['redis', (clock) => redisStore(redis!.url, 'single', clock)],
  ];
  if (opts.cluster) stores.push(['redis cluster', (clock) => redisStore(cluster!.url, 'cluster', clock)]);
  return { stores, redis: () => redis! };
}
