import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { demandKey, storeKey } from '../../src/counters/keys.js';
import { RedisShareStore } from '../../src/store/redis-share-store.js';
import { MemoryShareStore, type ShareRequest, type ShareStore } from '../../src/store/share-store.js';
import { type RedisServer, startRedis } from '../helpers/redis.js';
import { within } from '../helpers/time.js';

// The RLQS share table, the same cases against both stores: the memory one (this process) and quota-share.lua on
// a real redis-server (shared by replicas, expiry on Redis's clock). The Lua script and counters/fair-share.ts
// reserve() must agree to the last digit.

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

/** A bound of 64 instances keeps the bound's test quick (the stores' default is MAX_INSTANCES_PER_BUCKET). */
const BOUND = 64;
const stores: [string, () => ShareStore][] = [
  ['memory', () => new MemoryShareStore(100_000, BOUND)],
  ['redis', () => new RedisShareStore(client, (k) => storeKey('test:', k), 5000, BOUND)],
];
let n = 0;
const ask = (key: string, instance: string, demand: number, capacity = 100, ttlMs = 60_000, running = 0): ShareRequest => ({
  key,
  instance,
  demand,
  capacity,
  ttlMs,
  running,
});

describe.each(stores)('%s share store', (_name, make) => {
  it('grants an instance alone the capacity, and a second its fair share of what the first leaves', async () => {
    const store = make();
    const k = `a${n++}`;
    expect(await store.reserve([ask(k, 'i1', Infinity)], Date.now())).toEqual([{ rate: 100, held: 100, fair: 100, previous: undefined }]);
    // i1 still holds 100: i2 is owed 50 but gets nothing until i1 shrinks.
    expect(await store.reserve([ask(k, 'i2', Infinity)], Date.now())).toEqual([{ rate: 0, held: 0, fair: 50, previous: undefined }]);
    expect(await store.reserve([ask(k, 'i1', Infinity)], Date.now())).toEqual([{ rate: 50, held: 50, fair: 50, previous: 100 }]);
    expect(await store.reserve([ask(k, 'i2', Infinity)], Date.now())).toEqual([{ rate: 50, held: 50, fair: 50, previous: 0 }]);
  });

  it('holds a shrink as the old rate until the instance says it was sent', async () => {
    const store = make();
    const k = `r${n++}`;
    await store.reserve([ask(k, 'i1', Infinity)], Date.now());
    await store.reserve([ask(k, 'i2', Infinity)], Date.now());
    // i1 is to shrink to 50, but its Envoy still runs 100 until that is sent: the table keeps 100 for it.
    expect((await store.reserve([ask(k, 'i1', Infinity, 100, 60_000, 100)], Date.now()))[0]).toMatchObject({ rate: 50, held: 100 });
    expect((await store.reserve([ask(k, 'i2', Infinity)], Date.now()))[0]!.rate).toBe(0);
    // Sent: the next call says it runs 50, and the room is free.
    expect((await store.reserve([ask(k, 'i1', Infinity, 100, 60_000, 50)], Date.now()))[0]).toMatchObject({ rate: 50, held: 50, previous: 100 });
    expect((await store.reserve([ask(k, 'i2', Infinity)], Date.now()))[0]!.rate).toBe(50);
  });

  it('serves a small demand in full and gives the rest to the busy', async () => {
    const store = make();
    const k = `s${n++}`;
    await store.reserve([ask(k, 'small', 10)], Date.now());
    await store.reserve([ask(k, 'busy', Infinity)], Date.now());
    const [small] = await store.reserve([ask(k, 'small', 10)], Date.now());
    const [busy] = await store.reserve([ask(k, 'busy', Infinity)], Date.now());
    expect([small!.rate, busy!.rate]).toEqual([10, 90]);
  });

  it('agrees with the arithmetic on fractions, to the last digit', async () => {
    const store = make();
    const k = `f${n++}`;
    const grants: number[] = [];
    for (const [i, d] of [
      [1, 7.3],
      [2, Infinity],
      [3, 31.7],
      [1, 7.3],
      [2, Infinity],
      [3, 31.7],
    ] as const)
      grants.push((await store.reserve([ask(k, `i${i}`, d, 97.5)], Date.now()))[0]!.rate);
    expect(grants).toEqual([97.5, 0, 0, 7.3, 58.5, 31.7]);
  });

  it('forgets an instance whose entry ran out, and its grant with it', async () => {
    const store = make();
    const k = `e${n++}`;
    await store.reserve([ask(k, 'gone', Infinity, 100, 150)], Date.now());
    await within(5000, async () => (await store.reserve([ask(k, 'stays', Infinity)], Date.now()))[0]!.rate === 100, 'the entry expired');
  });

  it('keeps at most its bound of instances in one bucket, dropping those nearest their end', async () => {
    const store = make();
    const k = `c${n++}`;
    const many = Array.from({ length: BOUND + 3 }, (_, i) => ask(k, `i${i}`, 1, 1e6, 60_000 + i * 10));
    for (let i = 0; i < many.length; i += 20) await store.reserve(many.slice(i, i + 20), Date.now());
    // Each instance asks 1 of a million: the probe's fair share is what the others' 1s leave, which counts them.
    const [last] = await store.reserve([ask(k, 'probe', Infinity, 1e6, 120_000)], Date.now());
    expect(1e6 - last!.fair).toBe(BOUND - 1);
  });
});

it('the Lua script and the memory store grant the same digits over 400 random steps', async () => {
  const memory = new MemoryShareStore();
  const redisStore = new RedisShareStore(client, (k) => storeKey('test:', k), 5000);
  let seed = 7;
  const random = (): number => {
    seed = (seed * 16807) % 2147483647;
    return seed / 2147483647;
  };
  for (let step = 0; step < 400; step++) {
    const demand = random() < 0.2 ? Infinity : Math.round(random() * 20000) / 100;
    const r = ask('agree', `i${Math.floor(random() * 6)}`, demand, Math.round(random() * 50000) / 100, 60_000, Math.round(random() * 3000) / 100);
    const [m] = await memory.reserve([r], Date.now());
    const [x] = await redisStore.reserve([r], Date.now());
    expect(x, `step ${step}`).toEqual(m);
  }
});

it("the Redis table is one hash under the prefix, named from the counter key's fingerprints, and expires", async () => {
  const store = new RedisShareStore(client, (k) => storeKey('test:', k), 5000);
  const key = demandKey('{rlqs-test:tenant:abc}');
  await store.reserve([ask(key, 'i1', 3)], Date.now());
  const name = storeKey('test:', key);
  expect(await client.type(name)).toBe('hash');
  expect(await client.pttl(name)).toBeGreaterThan(50_000);
  // A field another program wrote in another shape is dropped, not read.
  await client.hset(name, 'junk', 'not a share');
  await store.reserve([ask(key, 'i2', 3)], Date.now());
  expect(await client.hexists(name, 'junk')).toBe(0);
});
