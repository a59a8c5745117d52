import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { demandKey, storeKey } from '../../src/counters/keys.js';
import { type DemandStore, MAX_INSTANCES_PER_BUCKET, MemoryDemandStore } from '../../src/store/demand-store.js';
import { RedisDemandStore } from '../../src/store/redis-demand-store.js';
import { type RedisServer, startRedis } from '../helpers/redis.js';
import { within } from '../helpers/time.js';

// The RLQS demand table, the same cases against both stores: the memory one (this process) and quota-demand.lua
// on a real redis-server (shared by replicas, expiry on Redis's clock).

let redis: RedisServer;
let client: Redis;
beforeAll(async () => {
  redis = await startRedis();
  client = new Redis(redis.port, '127.0.0.1');
});
afterAll(async () => {
  client?.disconnect();
  await redis?.stop();
});

const stores: [string, () => DemandStore][] = [
  ['memory', () => new MemoryDemandStore()],
  ['redis', () => new RedisDemandStore(client, (k) => storeKey('test:', k), 5000)],
];
let n = 0;

describe.each(stores)('%s demand store', (_name, make) => {
  const r = (key: string, instance: string, demand: number, ttlMs = 60_000) => ({ key, instance, demand, ttlMs });

  it("returns every live instance's demand, the writer's included, per bucket of the report", async () => {
    const store = make();
    const [a, b] = [`a${n++}`, `b${n++}`];
    await store.exchange([r(a, 'i1', 10), r(b, 'i1', 1)], Date.now());
    const tables = await store.exchange([r(a, 'i2', Infinity), r(b, 'i2', 2.5)], Date.now());
    const sorted = tables.map((t) => [...t].sort((x, y) => (x.instance < y.instance ? -1 : 1)));
    expect(sorted).toEqual([
      [
        { instance: 'i1', demand: 10 },
        { instance: 'i2', demand: Infinity },
      ],
      [
        { instance: 'i1', demand: 1 },
        { instance: 'i2', demand: 2.5 },
      ],
    ]);
  });

  it('forgets an instance whose entry ran out', async () => {
    const store = make();
    const k = `e${n++}`;
    await store.exchange([r(k, 'gone', 5, 150)], Date.now());
    await within(5000, async () => (await store.exchange([r(k, 'stays', 1)], Date.now()))[0]!.length === 1, 'the entry expired');
  });

  it('keeps at most its bound of instances in one bucket, dropping those nearest their end', async () => {
    const store = make();
    const k = `c${n++}`;
    const many = Array.from({ length: MAX_INSTANCES_PER_BUCKET + 3 }, (_, i) => r(k, `i${i}`, 1, 60_000 + i * 10));
    let last: { instance: string }[] = [];
    for (let i = 0; i < many.length; i += 500) last = (await store.exchange(many.slice(i, i + 500), Date.now())).at(-1)!;
    expect(last.length).toBe(MAX_INSTANCES_PER_BUCKET);
    expect(last.some((e) => e.instance === 'i0')).toBe(false);
    expect(last.some((e) => e.instance === `i${many.length - 1}`)).toBe(true);
  });
});

it("the Redis table is one hash under the prefix, named from the counter key's fingerprints, and expires", async () => {
  const store = new RedisDemandStore(client, (k) => storeKey('test:', k), 5000);
  const key = demandKey('{rlqs-test:tenant:abc}');
  await store.exchange([{ key, instance: 'i1', demand: 3, ttlMs: 60_000 }], Date.now());
  const name = storeKey('test:', key);
  expect(await client.type(name)).toBe('hash');
  expect(await client.pttl(name)).toBeGreaterThan(50_000);
});
