import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { demandKey, storeKey } from '../../src/counters/keys.js';
import { StoreDegradedError, StoreKeyError, StoreUnavailableError } from '../../src/errors.js';
import { MAX_BUCKETS_IN_FLIGHT, RedisShareStore } from '../../src/rlqs/shares/redis-share-store.js';
import { MemoryShareStore, type ShareGrant, type ShareOutcome, type ShareRequest, type ShareStore } from '../../src/rlqs/shares/share-store.js';
import { parseRedisUrl } from '../../src/store/redis-connection.js';
import { RedisStore } from '../../src/store/redis-store.js';
import { FIXED } from '../helpers/kinds.js';
import { type RedisServer, startRedis } from '../helpers/redis.js';
import { silentLogger } from '../helpers/service.js';
import { within } from '../helpers/time.js';

// The RLQS share table, the same cases against both stores: the memory one (this process) and quota-share.lua on
// a real redis-server (shared by replicas, expiry on Redis's clock). The Lua script and counters/fair-share.ts
// reserve() must agree to the last digit.

let redis: RedisServer;
let client: Redis;
/** The share table reaches Redis through the counter store, under its health, as the service wires it. */
let counters: RedisStore;
beforeAll(async () => {
  redis = await startRedis();
  client = new Redis(redis.port, '127.0.0.1');
  counters = new RedisStore({ connection: parseRedisUrl(redis.url, 'single'), timeoutMs: 25, keyPrefix: 'test:', logger: silentLogger });
  await counters.waitReady(5000);
});
afterAll(async () => {
  client?.disconnect();
  await counters?.close();
  await redis?.stop();
});

/** The grants of a call that must have succeeded. */
const granted = (outcomes: ShareOutcome[]): ShareGrant[] =>
  outcomes.map((o) => {
    if (o instanceof Error) throw o;
    return o;
  });

/** A bound of 64 instances keeps the bound's test quick (the stores' default is MAX_INSTANCES_PER_BUCKET). Each
 * test uses one bucket of its own store; `lose` forgets its table behind the store's back: the memory store keeps
 * two tables, so two others evict it; Redis's is deleted, as an eviction or a restart without persistence would. */
const BOUND = 64;
const stores: [string, { make: () => ShareStore; lose: (store: ShareStore, key: string) => Promise<void> }][] = [
  [
    'memory',
    {
      make: () => new MemoryShareStore(2, BOUND),
      lose: async (store) => {
        for (const other of ['evicts-1', 'evicts-2']) granted(await store.reserve([ask(other, 'x', 1)], Date.now()));
      },
    },
  ],
  [
    'redis',
    {
      make: () => new RedisShareStore(counters, (k) => storeKey('test:', k), 5000, BOUND),
      lose: async (_store, key) => {
        expect(await client.del(storeKey('test:', key))).toBe(1);
      },
    },
  ],
];
let n = 0;
/** A report interval of 1 s: the tables re-plan every 200 ms (and at once on a demand's move). */
const ask = (key: string, instance: string, demand: number, capacity = 100, ttlMs = 60_000, running = 0, rebuildMs = 0, intervalMs = 1000): ShareRequest => ({
  key,
  instance,
  demand,
  capacity,
  ttlMs,
  running,
  rebuildMs,
  intervalMs,
});

describe.each(stores)('%s share store', (_name, { make, lose }) => {
  it('grants an instance alone the capacity, and a second its fair share of what the first leaves', async () => {
    const store = make();
    const k = `a${n++}`;
    expect(granted(await store.reserve([ask(k, 'i1', Infinity)], Date.now()))).toEqual([{ rate: 100, held: 100, fair: 100, previous: undefined, tell: false }]);
    // i1 still holds 100: i2 is owed 50 but gets only the headroom pool (a tenth of the capacity) until i1
    // shrinks, and the replicas are to be told.
    expect(granted(await store.reserve([ask(k, 'i2', Infinity)], Date.now()))).toEqual([{ rate: 10, held: 10, fair: 50, previous: undefined, tell: true }]);
    expect(granted(await store.reserve([ask(k, 'i1', Infinity)], Date.now()))).toEqual([{ rate: 50, held: 50, fair: 50, previous: 100, tell: false }]);
    expect(granted(await store.reserve([ask(k, 'i2', Infinity)], Date.now()))).toEqual([{ rate: 50, held: 50, fair: 50, previous: 10, tell: false }]);
  });

  it('tells the replicas of a bucket held back once per report interval, however often it is held back', async () => {
    const store = make();
    const k = `t${n++}`;
    const tells = async (instance: string): Promise<boolean> =>
      granted(await store.reserve([ask(k, instance, Infinity, 100, 60_000, 0, 0, 400)], Date.now()))[0]!.tell;
    await tells('i1');
    const start = Date.now();
    const told: boolean[] = [];
    for (let i = 0; i < 5; i++) told.push(await tells(`n${i}`));
    if (Date.now() - start < 400) expect(told).toEqual([true, false, false, false, false]);
    await within(5000, async () => (await tells('late')) === true, 'told again, an interval later');
  });

  it('holds a shrink as the old rate until the instance says it was sent', async () => {
    const store = make();
    const k = `r${n++}`;
    granted(await store.reserve([ask(k, 'i1', Infinity)], Date.now()));
    granted(await store.reserve([ask(k, 'i2', Infinity)], Date.now()));
    // i1 is to shrink to 50, but its Envoy still runs 100 until that is sent: the table keeps 100 for it.
    expect(granted(await store.reserve([ask(k, 'i1', Infinity, 100, 60_000, 100)], Date.now()))[0]).toMatchObject({ rate: 50, held: 100 });
    // i2 gets the headroom pool only (a tenth of the capacity): i1's 100 leaves nothing else.
    expect(granted(await store.reserve([ask(k, 'i2', Infinity)], Date.now()))[0]!.rate).toBe(10);
    // Sent: the next call says it runs 50, and the room is free.
    expect(granted(await store.reserve([ask(k, 'i1', Infinity, 100, 60_000, 50)], Date.now()))[0]).toMatchObject({ rate: 50, held: 50, previous: 100 });
    expect(granted(await store.reserve([ask(k, 'i2', Infinity)], Date.now()))[0]!.rate).toBe(50);
  });

  it('serves a small demand in full, with a tenth more to grow into, and gives the rest to the busy', async () => {
    const store = make();
    const k = `s${n++}`;
    granted(await store.reserve([ask(k, 'small', 10)], Date.now()));
    granted(await store.reserve([ask(k, 'busy', Infinity)], Date.now()));
    const [small] = granted(await store.reserve([ask(k, 'small', 10)], Date.now()));
    const [busy] = granted(await store.reserve([ask(k, 'busy', Infinity)], Date.now()));
    expect([small!.rate, busy!.rate]).toEqual([11, 90]);
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
      grants.push(granted(await store.reserve([ask(k, `i${i}`, d, 97.5)], Date.now()))[0]!.rate);
    // i2 gets the headroom pool while i1 holds all; i1 then gets its demand and a tenth more; i3 its demand and a tenth.
    expect(grants).toEqual([97.5, 9.75, 0, 8.03, 58.5, 34.87]);
  });

  it('forgets an instance whose entry ran out, and its grant with it', async () => {
    const store = make();
    const k = `e${n++}`;
    granted(await store.reserve([ask(k, 'gone', Infinity, 100, 150, 0, 0, 500)], Date.now()));
    await within(
      5000,
      async () => granted(await store.reserve([ask(k, 'stays', Infinity, 100, 60_000, 0, 0, 500)], Date.now()))[0]!.rate === 100,
      'the entry expired',
    );
  });

  it('keeps at most its bound of instances in one bucket, dropping those nearest their end', async () => {
    const store = make();
    const k = `c${n++}`;
    const many = Array.from({ length: BOUND + 3 }, (_, i) => ask(k, `i${i}`, 1, 1e6, 60_000 + i * 10));
    for (let i = 0; i < many.length; i += 20) granted(await store.reserve(many.slice(i, i + 20), Date.now()));
    // Each instance asks 1 of a million: the probe's fair share is what the others' 1s leave, which counts them.
    const [last] = granted(await store.reserve([ask(k, 'probe', Infinity, 1e6, 120_000)], Date.now()));
    expect(1e6 - last!.fair).toBe(BOUND - 1);
  });

  it('rebuilds a lost table: no grant grows past what its Envoy runs, so the rates never sum past the capacity', async () => {
    const store = make();
    const k = `l${n++}`;
    const REBUILD = 400;
    // i1 and i2 run 50 each (each call says what its Envoy runs: what it was last sent).
    granted(await store.reserve([ask(k, 'i1', Infinity, 100, 60_000, 0, REBUILD)], Date.now()));
    granted(await store.reserve([ask(k, 'i2', Infinity, 100, 60_000, 0, REBUILD)], Date.now()));
    granted(await store.reserve([ask(k, 'i1', Infinity, 100, 60_000, 100, REBUILD)], Date.now()));
    granted(await store.reserve([ask(k, 'i1', Infinity, 100, 60_000, 50, REBUILD)], Date.now()));
    expect(granted(await store.reserve([ask(k, 'i2', Infinity, 100, 60_000, 0, REBUILD)], Date.now()))[0]!.rate).toBe(50);
    await lose(store, k);
    // The rebuild runs from each call that finds the table lost (the newcomer's, then each instance's that runs a
    // grant and has no entry), on that call's clock: it ends REBUILD after the last of them, `foundAt`, not after
    // the loss (on a slow machine those calls can come well after it; CI saw the rebuild outlast such a wait).
    const firstAt = Date.now();
    let foundAt = firstAt;
    // A newcomer first: without the others' entries it would be granted all 100 while they still run 50 each.
    const [newcomer] = granted(await store.reserve([ask(k, 'i3', Infinity, 100, 60_000, 0, REBUILD)], foundAt));
    // i1 reports what it runs: its entry is back, its grant kept, not grown.
    foundAt = Date.now();
    const [i1] = granted(await store.reserve([ask(k, 'i1', Infinity, 100, 60_000, 50, REBUILD)], foundAt));
    foundAt = Date.now();
    const [i2] = granted(await store.reserve([ask(k, 'i2', Infinity, 100, 60_000, 50, REBUILD)], foundAt));
    if (Date.now() - firstAt < REBUILD) {
      expect(newcomer!.rate).toBe(0);
      expect(i1!.rate + i2!.rate + newcomer!.rate).toBeLessThanOrEqual(100);
    }
    // Rebuilt: each instance's entry holds what it runs, and shares move again.
    await within(5000, () => Date.now() - foundAt > REBUILD, 'the rebuild over');
    granted(await store.reserve([ask(k, 'i1', Infinity, 100, 60_000, 50, REBUILD)], Date.now()));
    granted(await store.reserve([ask(k, 'i2', Infinity, 100, 60_000, 50, REBUILD)], Date.now()));
    // i3 is owed a third; i1 and i2 still run 50 each, which leaves it the headroom pool until they shrink.
    expect(granted(await store.reserve([ask(k, 'i3', Infinity, 100, 60_000, 0, REBUILD)], Date.now()))[0]).toMatchObject({ rate: 10, fair: 100 / 3 });
  });

  it('finds a table lost through an instance that runs a grant and has no entry, in a process that never saw it', async () => {
    const store = make();
    const k = `m${n++}`;
    // i1 runs 40 (told by another replica, before the table was lost): its grant is kept, not grown to 100.
    expect(granted(await store.reserve([ask(k, 'i1', Infinity, 100, 60_000, 40, 60_000)], Date.now()))[0]).toMatchObject({ rate: 40, held: 40 });
    expect(granted(await store.reserve([ask(k, 'i2', Infinity, 100, 60_000, 0, 60_000)], Date.now()))[0]!.rate).toBe(0);
  });

  it('does not take a table that expired, unused, for a lost one', async () => {
    const store = make();
    const k = `x${n++}`;
    granted(await store.reserve([ask(k, 'gone', Infinity, 100, 150, 0, 60_000, 500)], Date.now()));
    await within(
      5000,
      async () => granted(await store.reserve([ask(k, 'new', Infinity, 100, 150, 0, 60_000, 500)], Date.now()))[0]!.rate === 100,
      'the first table over',
    );
  });
});

it.each([
  ['', 0],
  [', tables rebuilt (instances that run a grant and have no entry)', 60_000],
])('the Lua script and the memory store grant the same digits over 400 random steps, a few buckets a call%s', async (_what, rebuildMs) => {
  const memory = new MemoryShareStore();
  const redisStore = new RedisShareStore(counters, (k) => storeKey('test:', k), 5000);
  let seed = 7;
  const random = (): number => {
    seed = (seed * 16807) % 2147483647;
    return seed / 2147483647;
  };
  for (let step = 0; step < 400; step++) {
    const call = Array.from({ length: 1 + Math.floor(random() * 4) }, () => {
      const demand = random() < 0.2 ? Infinity : Math.round(random() * 20000) / 100;
      const key = `agree-${rebuildMs}-${Math.floor(random() * 3)}`;
      const running = Math.round(random() * 3000) / 100;
      // A long interval: the tables re-plan on demands' moves only, never on the two clocks' time.
      return ask(key, `i${Math.floor(random() * 6)}`, demand, Math.round(random() * 50000) / 100, 60_000, running, rebuildMs, 600_000);
    });
    const m = granted(await memory.reserve(call, Date.now()));
    const x = granted(await redisStore.reserve(call, Date.now()));
    expect(x, `step ${step}`).toEqual(m);
  }
});

it('fails a bucket whose key holds another type alone; the others of its call are granted', async () => {
  const store = new RedisShareStore(counters, (k) => storeKey('test:', k), 5000);
  await client.set(storeKey('test:', 'poisoned:rlqs'), 'a string');
  const [a, poisoned, b] = await store.reserve([ask('fine-a:rlqs', 'i1', 5), ask('poisoned:rlqs', 'i1', 5), ask('fine-b:rlqs', 'i1', 5)], Date.now());
  expect(poisoned).toBeInstanceOf(StoreKeyError);
  expect((poisoned as StoreKeyError).kind).toBe('WRONGTYPE');
  expect([a, b]).toMatchObject([{ rate: 100 }, { rate: 100 }]);
});

it("the Redis table is one hash under the prefix, named from the counter key's fingerprints, and expires", async () => {
  const store = new RedisShareStore(counters, (k) => storeKey('test:', k), 5000);
  const key = demandKey('{rlqs-test:tenant:abc}');
  granted(await store.reserve([ask(key, 'i1', 3)], Date.now()));
  const name = storeKey('test:', key);
  expect(await client.type(name)).toBe('hash');
  expect(await client.pttl(name)).toBeGreaterThan(50_000);
  // A field another program wrote in another shape is dropped, not read.
  await client.hset(name, 'junk', 'not a share');
  // Numbers Lua's tonumber reads but no writer makes (NaN would lift the cap on every grant): dropped too.
  const end = Date.now() + 60_000;
  await client.hset(name, 'nan-held', `5 nan ${end}`, 'inf-demand', `inf 5 ${end}`, 'hex', `0x10 5 ${end}`);
  const [g] = granted(await store.reserve([ask(key, 'i2', 3)], Date.now()));
  expect(await client.hexists(name, 'junk')).toBe(0);
  expect(await client.hmget(name, 'nan-held', 'inf-demand')).toEqual([null, null]);
  expect(Number.isFinite(g!.rate)).toBe(true);
});

// The table with a frozen Redis (SIGSTOP: the connection stays open, nothing answers): it must stop calling it,
// as RLS decisions do, so nothing piles up in the client. A redis-server of its own, frozen and thawed here.
describe('the Redis share table with a frozen Redis', () => {
  let frozen: RedisServer;
  let store: RedisStore;
  beforeAll(async () => {
    frozen = await startRedis();
    store = new RedisStore({ connection: parseRedisUrl(frozen.url, 'single'), timeoutMs: 25, keyPrefix: 'test:', logger: silentLogger });
    await store.waitReady(5000);
  });
  afterAll(async () => {
    frozen?.signal('SIGCONT');
    await store?.close();
    await frozen?.stop();
  });
  const some = (n: number, tag: string) => Array.from({ length: n }, (_, i) => ask(`${tag}-${i}:rlqs`, 'i1', 5));

  it('finds a Redis that only it calls frozen, then refuses at once without calling', async () => {
    const shares = new RedisShareStore(store, (k) => storeKey('test:', k), 100);
    granted(await shares.reserve(some(10, 'warm'), Date.now()));
    frozen.signal('SIGSTOP');
    await within(
      5000,
      async () => {
        const outcomes = await shares.reserve(some(10, 'frozen'), Date.now());
        expect(outcomes.every((o) => o instanceof StoreUnavailableError)).toBe(true);
        return store.health().degraded;
      },
      'the store degraded',
    );
    expect(shares.unavailable()).toBeInstanceOf(StoreDegradedError);
    const start = performance.now();
    const [refused] = await shares.reserve(some(1, 'refused'), Date.now());
    expect(refused).toBeInstanceOf(StoreDegradedError);
    expect(performance.now() - start).toBeLessThan(20); // not tried: nothing more waits in the client
    frozen.signal('SIGCONT');
    await within(5000, () => !store.health().degraded, 'the store recovered');
    await within(5000, async () => (await shares.reserve(some(1, 'back'), Date.now()))[0] instanceof StoreUnavailableError === false, 'answered again');
  });

  it('finds Redis frozen even while this process is too busy for its timers to be on time', async () => {
    frozen.signal('SIGSTOP');
    // Every 60 ms the process is busy for 50: each 25 ms timeout fires late, which excuses Redis for a hiccup,
    // but calls with no reply at all for a second mean Redis is not answering.
    const busy = setInterval(() => {
      const until = performance.now() + 50;
      while (performance.now() < until);
    }, 60);
    try {
      await within(
        8000,
        async () => {
          await Promise.resolve(
            store.check(
              [
                {
                  key: 'busy:{x}:second',
                  windowMs: 1000,
                  limit: 10,
                  op: 'count' as const,
                  hits: 1,
                  kind: FIXED,
                  burst: 0,
                  group: 0,
                  shadow: false,
                  quota: false,
                },
              ].map((c) => ({
                ...c,
                charge: false,
                calendar: 0,
                reservation: undefined,
                slots: undefined,
              })),
            ),
          ).catch(() => undefined);
          return store.health().degraded;
        },
        'the store degraded',
      );
    } finally {
      clearInterval(busy);
      frozen.signal('SIGCONT');
    }
    await within(5000, () => !store.health().degraded, 'the store recovered');
  });

  it('refuses a report at once when its buckets would pass what may wait for Redis', async () => {
    // The store's health kept "answering" on purpose, so only the bound stands between the reports and the client.
    const ungated = { client: store.client, call: <T>(run: (c: typeof store.client) => Promise<T>) => run(store.client), health: () => store.health() };
    const bounded = new RedisShareStore({ ...ungated, health: () => ({ degraded: false, reason: undefined }) }, (k) => storeKey('test:', k), 60_000);
    frozen.signal('SIGSTOP');
    try {
      const waiting = bounded.reserve(some(MAX_BUCKETS_IN_FLIGHT, 'fill'), Date.now()); // all sent, none answered
      const [over] = await bounded.reserve(some(1, 'over'), Date.now());
      expect(over).toBeInstanceOf(StoreUnavailableError);
      expect(bounded.unavailable()).toBeInstanceOf(StoreUnavailableError);
      frozen.signal('SIGCONT');
      expect((await waiting).every((o) => !(o instanceof Error))).toBe(true); // answered once Redis is back
      expect(bounded.unavailable()).toBeUndefined();
    } finally {
      frozen.signal('SIGCONT');
    }
  }, 60_000);
});

it('the memory share table forgets buckets whose every entry has expired, not only past its bound', async () => {
  const store = new MemoryShareStore();
  const t0 = 1_000_000;
  // A stream's worth of invented buckets, reported once and never again (entries live 10 s).
  for (let i = 0; i < 2000; i++) await store.reserve([ask(`gone-${i}`, 'hostile', 5, 100, 10_000)], t0);
  await store.reserve([ask('kept', 'envoy', 5, 100, 60_000)], t0);
  expect(store.size).toBe(2001);
  // Past their expiry, the reports that keep coming drop them from the front; the live bucket stays.
  for (let i = 0; i < 300; i++) await store.reserve([ask('kept', 'envoy', 5, 100, 60_000)], t0 + 20_000 + i);
  expect(store.size).toBe(1);
  const [kept] = await store.reserve([ask('kept', 'envoy', 5, 100, 60_000)], t0 + 21_000);
  expect((kept as ShareGrant).previous).toBeGreaterThan(0); // its entry survived the sweep
});

it("a report's call reads three fields of its table, not the table: the same Redis commands per call at 8 and at 128 instances", async () => {
  const store = new RedisShareStore(counters, (k) => storeKey('test:', k), 5000);
  const commands = async (): Promise<Record<string, number>> => {
    const stats = await client.info('commandstats');
    const out: Record<string, number> = {};
    for (const m of stats.matchAll(/cmdstat_(\w+):calls=(\d+)/g)) out[m[1]!] = Number(m[2]);
    return out;
  };
  const perCall: Record<number, Record<string, number>> = {};
  for (const n of [8, 128]) {
    const key = `cost-${n}:rlqs`;
    // Each instance's first report plans the table (it is new there); then two steady rounds of reports.
    for (let i = 0; i < n; i++) granted(await store.reserve([ask(key, `i${i}`, 10 + (i % 7), 1000, 60_000, 0, 0, 600_000)], Date.now()));
    const before = await commands();
    for (let round = 0; round < 2; round++)
      for (let i = 0; i < n; i++) granted(await store.reserve([ask(key, `i${i}`, 10 + (i % 7), 1000, 60_000, 0, 0, 600_000)], Date.now()));
    const after = await commands();
    perCall[n] = Object.fromEntries(['hgetall', 'hmget', 'hset', 'pexpireat'].map((c) => [c, ((after[c] ?? 0) - (before[c] ?? 0)) / (2 * n)]));
  }
  expect(perCall[8]).toEqual({ hgetall: 0, hmget: 1, hset: 1, pexpireat: 1 });
  expect(perCall[128]).toEqual(perCall[8]);
});
