import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/counters/clock.js';
import { windowCounterName } from '../../src/counters/keys.js';
import { StoreKeyError } from '../../src/errors.js';
import type { CounterCheck } from '../../src/limits/check.js';
import { MemoryStore } from '../../src/store/memory-store.js';
import { parseRedisUrl } from '../../src/store/redis-connection.js';
import { CHECK_SCRIPT, ONE_PLAIN_SCRIPT } from '../../src/store/redis-script.js';
import { RedisStore } from '../../src/store/redis-store.js';
import type { Store } from '../../src/store/store.js';
import { counterCheck } from '../helpers/checks.js';
import { SLIDING } from '../helpers/kinds.js';
import { type RedisServer, startRedis } from '../helpers/redis.js';
import { silentLogger } from '../helpers/service.js';

const T0 = 1_800_000_000_000;
let keySeq = 0;
const check = counterCheck;

/** The same scenarios against every store: they must decide identically. */
const stores: [string, (clock: ManualClock) => Store][] = [];
let redis: RedisServer;

beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  for (const s of opened) await s.close();
  await redis?.stop();
});

const opened: Store[] = [];
stores.push(['memory', (clock) => new MemoryStore({ clock })]);
stores.push([
  'redis',
  (clock) => {
    const s = new RedisStore({ connection: parseRedisUrl(redis.url, 'single'), timeoutMs: 1000, keyPrefix: `conf${++keySeq}:`, logger: silentLogger, clock });
    opened.push(s);
    return s;
  },
]);

describe.each(stores)('store conformance: %s', (_name, make) => {
  const setup = async (): Promise<{ store: Store; clock: ManualClock }> => {
    const clock = new ManualClock(T0);
    const store = make(clock);
    if (store instanceof RedisStore) await store.waitReady(5000);
    return { store, clock };
  };

  it('counts up to the limit, then refuses without counting', async () => {
    const { store } = await setup();
    const rs = [];
    for (let i = 0; i < 5; i++) rs.push(await store.check([check()]));
    expect(rs.map((r) => r.admitted)).toEqual([true, true, true, false, false]);
    expect(rs.map((r) => r.curr[0])).toEqual([0, 1, 2, 3, 3]);
    expect(rs[0]!.nowMs).toBe(T0);
  });

  it('checks a request atomically across windows and descriptors', async () => {
    const { store } = await setup();
    const windows = [check({ key: 'a', limit: 5 }), check({ key: 'a-min', limit: 5, windowMs: 60_000 }), check({ key: 'b', limit: 1, group: 1 })];
    expect((await store.check(windows)).admitted).toBe(true);
    const r = await store.check(windows);
    expect(r.admitted).toBe(false);
    expect(r.over).toEqual([false, false, true]);
    const again = await store.check([windows[0]!]);
    expect(again.curr[0]).toBe(1);
  });

  it('a request holding one window twice: each checked against the count before the request, both counted', async () => {
    const { store } = await setup();
    const twice = [check({ key: 'dup', limit: 3, hits: 1 }), check({ key: 'dup', limit: 3, hits: 1, group: 1 })];
    const rs = [];
    for (let i = 0; i < 3; i++) rs.push(await store.check(twice));
    expect(rs.map((r) => r.admitted)).toEqual([true, true, false]);
    expect(rs.map((r) => r.curr)).toEqual([
      [0, 0],
      [2, 2],
      [4, 4],
    ]);
    // The refused one counted nothing: one more window alone still sees 4.
    expect((await store.check([check({ key: 'dup', limit: 10 })])).curr).toEqual([4]);
  });

  it('counts a shadow group only while it has room, and never blocks with it', async () => {
    const { store } = await setup();
    const windows = [check({ key: 'e', limit: 10 }), check({ key: 's', limit: 1, group: 1, shadow: true })];
    await store.check(windows);
    const r = await store.check(windows);
    expect(r.admitted).toBe(true);
    expect(r.over).toEqual([false, true]);
    const after = await store.check(windows);
    expect([after.curr[0], after.curr[1]]).toEqual([2, 1]);
  });

  it('starts a new window at the epoch-aligned boundary', async () => {
    const { store, clock } = await setup();
    clock.set(T0 + 999);
    for (let i = 0; i < 3; i++) await store.check([check()]);
    expect((await store.check([check()])).admitted).toBe(false);
    clock.set(T0 + 1000);
    const r = await store.check([check()]);
    expect(r.admitted).toBe(true);
    expect(r.curr[0]).toBe(0);
  });

  it('sliding window: weighs the previous window', async () => {
    const { store, clock } = await setup();
    const s = check({ kind: SLIDING, limit: 10, windowMs: 60_000 });
    for (let i = 0; i < 10; i++) await store.check([s]);
    clock.set(T0 + 75_000);
    const rs = [];
    for (let i = 0; i < 3; i++) rs.push(await store.check([s]));
    expect(rs.map((r) => r.admitted)).toEqual([true, true, false]);
    expect(rs.map((r) => [r.prev[0], r.curr[0]])).toEqual([
      [10, 0],
      [10, 1],
      [10, 2],
    ]);
    clock.set(T0 + 78_000);
    expect((await store.check([s])).admitted).toBe(true);
    // Two windows later, nothing of the first remains.
    clock.set(T0 + 180_000);
    const late = await store.check([s]);
    expect([late.prev[0], late.curr[0]]).toEqual([0, 0]);
  });

  it('hits: several at once, and 0 as check only', async () => {
    const { store } = await setup();
    expect((await store.check([check({ hits: 2 })])).admitted).toBe(true);
    expect((await store.check([check({ hits: 2 })])).admitted).toBe(false);
    const peek = await store.check([check({ hits: 0 })]);
    expect([peek.admitted, peek.curr[0]]).toEqual([true, 2]);
    await store.check([check()]);
    const full = await store.check([check({ hits: 0 })]);
    expect([full.admitted, full.curr[0]]).toEqual([false, 3]);
  });

  // Token bucket (GCRA): 10 per second (T = 100 ms = 1000 ticks of 1/10 ms), so curr (the debt) counts
  // 1000 per request taken and is paid back at 10 per ms.
  const bucket = (over: Partial<CounterCheck> = {}): CounterCheck => check({ key: 'tb', limit: 10, windowMs: 1000, burst: 20, ...over });
  const admits = async (store: Store, c: CounterCheck, n: number): Promise<boolean[]> => {
    const out = [];
    for (let i = 0; i < n; i++) out.push((await store.check([c])).admitted);
    return out;
  };

  it('token bucket: a steady rate with burst 1 admits one request per emission interval, evenly', async () => {
    const { store, clock } = await setup();
    const even = bucket({ burst: 1 });
    for (let i = 0; i < 15; i++) {
      clock.set(T0 + i * 100);
      const r = await store.check([even]);
      expect([r.admitted, r.curr[0]]).toEqual([true, 0]);
      clock.set(T0 + i * 100 + 50);
      const early = await store.check([even]);
      expect([early.admitted, early.curr[0]]).toEqual([false, 500]);
    }
  });

  it('token bucket: after an idle spell, admits exactly the burst at once', async () => {
    const { store, clock } = await setup();
    clock.set(T0 + 3_600_000);
    const rs = [];
    for (let i = 0; i < 21; i++) rs.push(await store.check([bucket()]));
    expect(rs.map((r) => r.admitted)).toEqual([...Array(20).fill(true), false]);
    expect(rs.map((r) => r.curr[0])).toEqual([...Array.from({ length: 20 }, (_, i) => i * 1000), 20_000]);
  });

  it('token bucket: refills partially, one token per emission interval', async () => {
    const { store, clock } = await setup();
    await admits(store, bucket(), 20);
    clock.set(T0 + 250);
    const rs = [];
    for (let i = 0; i < 3; i++) rs.push(await store.check([bucket()]));
    expect(rs.map((r) => [r.admitted, r.curr[0]])).toEqual([
      [true, 17_500],
      [true, 18_500],
      [false, 19_500],
    ]);
    clock.set(T0 + 2250);
    expect((await store.check([bucket({ hits: 0 })])).curr[0]).toBe(0);
  });

  it('token bucket: hits_addend n takes n tokens at once; more than the burst never fits; 0 only checks', async () => {
    const { store, clock } = await setup();
    expect(await admits(store, bucket({ hits: 5 }), 5)).toEqual([true, true, true, true, false]);
    const peek = await store.check([bucket({ hits: 0 })]);
    expect([peek.admitted, peek.curr[0], peek.over[0]]).toEqual([false, 20_000, true]);
    clock.set(T0 + 500);
    expect(await admits(store, bucket({ hits: 5 }), 2)).toEqual([true, false]);
    clock.set(T0 + 3_600_000);
    const huge = await store.check([bucket({ hits: 21 })]);
    expect([huge.admitted, huge.curr[0]]).toEqual([false, 0]);
  });

  it('token bucket: rejected requests take nothing', async () => {
    const { store, clock } = await setup();
    const slow = bucket({ limit: 1, burst: 2 });
    expect(await admits(store, slow, 2)).toEqual([true, true]);
    clock.set(T0 + 500);
    const rejected = await Promise.all(Array.from({ length: 50 }, () => store.check([slow])));
    expect(rejected.every((r) => !r.admitted && r.curr[0] === 1500)).toBe(true);
    clock.set(T0 + 1000);
    const r = await store.check([slow]);
    expect([r.admitted, r.curr[0]]).toEqual([true, 1000]);
  });

  it('token bucket with a fixed hourly window on one descriptor: both must fit, both are counted', async () => {
    const { store, clock } = await setup();
    const both = [bucket(), check({ key: 'hour', limit: 25, windowMs: 3_600_000 })];
    const first = [];
    for (let i = 0; i < 21; i++) first.push(await store.check(both));
    expect(first.map((r) => r.admitted)).toEqual([...Array(20).fill(true), false]);
    expect(first[20]!.over).toEqual([true, false]);
    expect(first[20]!.curr).toEqual([20_000, 20]);
    clock.set(T0 + 1000);
    const next = [];
    for (let i = 0; i < 6; i++) next.push(await store.check(both));
    expect(next.map((r) => r.admitted)).toEqual([true, true, true, true, true, false]);
    // The hour is full; the bucket, blocked with it, was not counted.
    expect([next[5]!.over, next[5]!.curr]).toEqual([
      [false, true],
      [15_000, 25],
    ]);
  });

  it('token bucket: exact under 200 concurrent checks', async () => {
    const { store } = await setup();
    const rs = await Promise.all(Array.from({ length: 200 }, () => store.check([bucket({ key: 'tb-conc', burst: 37 })])));
    expect(rs.filter((r) => r.admitted)).toHaveLength(37);
  });

  it('is exact under 200 concurrent checks', async () => {
    const { store } = await setup();
    const rs = await Promise.all(Array.from({ length: 200 }, () => store.check([check({ limit: 37, key: 'conc' })])));
    expect(rs.filter((r) => r.admitted)).toHaveLength(37);
  });
});

describe('redis store specifics', () => {
  /** A Redis store on a manual clock (T0 + 250 ms) under `prefix`, and a minute window of limit 1 it has filled. */
  async function withFullWindow(prefix: string): Promise<{ store: RedisStore; full: CounterCheck }> {
    const clock = new ManualClock(T0 + 250);
    const store = new RedisStore({ connection: parseRedisUrl(redis.url, 'single'), timeoutMs: 1000, keyPrefix: prefix, logger: silentLogger, clock });
    opened.push(store);
    await store.waitReady(5000);
    const full = check({ key: 'full', windowMs: 60_000, limit: 1 });
    expect((await store.check([full])).admitted).toBe(true);
    return { store, full };
  }

  it("uses Redis's clock when no clock is injected", async () => {
    const store = new RedisStore({ connection: parseRedisUrl(redis.url, 'single'), timeoutMs: 1000, keyPrefix: 'clock:', logger: silentLogger });
    opened.push(store);
    await store.waitReady(5000);
    const [sec, usec] = (await redis.cli('TIME')).split('\n').map(Number);
    const r = await store.check([check()]);
    expect(Math.abs(r.nowMs - (sec! * 1000 + usec! / 1000))).toBeLessThan(1000);
  });

  it('keys carry the prefix and expire one second after the last window that reads them', async () => {
    const store = new RedisStore({ connection: parseRedisUrl(redis.url, 'single'), timeoutMs: 1000, keyPrefix: 'ttl:', logger: silentLogger });
    opened.push(store);
    await store.waitReady(5000);
    const r = await store.check([check({ key: 'fixed', windowMs: 60_000 }), check({ key: 'slide', windowMs: 60_000, kind: SLIDING, group: 1 })]);
    // One plain string per window, named by the window's index (src/counters/keys.ts, layout 2).
    const fixed = Number(await redis.cli('PTTL', windowCounterName('ttl:v2:fixed', 60_000, r.nowMs)));
    const slide = Number(await redis.cli('PTTL', windowCounterName('ttl:v2:slide', 60_000, r.nowMs)));
    expect(await redis.cli('GET', windowCounterName('ttl:v2:fixed', 60_000, r.nowMs))).toBe('1');
    expect(fixed).toBeGreaterThan(1000);
    expect(fixed).toBeLessThanOrEqual(61_000);
    expect(slide).toBeGreaterThan(60_000);
    expect(slide).toBeLessThanOrEqual(121_000);
  });

  it('a rejected request writes no counter of its own: no count, no new key, no expiry touched', async () => {
    const clock = new ManualClock(T0 + 250);
    const store = new RedisStore({ connection: parseRedisUrl(redis.url, 'single'), timeoutMs: 1000, keyPrefix: 'rej:', logger: silentLogger, clock });
    opened.push(store);
    await store.waitReady(5000);
    const windows = (hits: number) => [
      check({ key: 'sec', limit: 10, hits }),
      check({ key: 'min', windowMs: 60_000, limit: 2, hits }),
      check({ key: 'tb', windowMs: 60_000, limit: 1, burst: 9, hits, group: 1 }),
    ];
    expect((await store.check(windows(2))).admitted).toBe(true);
    const names = [windowCounterName('rej:v2:sec', 1000, T0), windowCounterName('rej:v2:min', 60_000, T0), 'rej:v2:tb'];
    const before = await Promise.all(names.map(async (n) => [await redis.cli('GET', n), Number(await redis.cli('PTTL', n)) > 0]));
    const r = await store.check(windows(1)); // the minute is full: rejected
    expect(r.admitted).toBe(false);
    expect(r.over).toEqual([false, true, false]);
    expect(await Promise.all(names.map(async (n) => [await redis.cli('GET', n), Number(await redis.cli('PTTL', n)) > 0]))).toEqual(before);
    // A check-only request (hits 0) writes nothing either, even with room everywhere.
    expect((await store.check([check({ key: 'fresh', hits: 0 })])).admitted).toBe(true);
    expect(await redis.cli('--scan', '--pattern', 'rej:v2:fresh*')).toBe('');
  });

  it('a rejected plain request (counted first, then taken back) leaves no key it created and no count or expiry changed', async () => {
    const { store, full } = await withFullWindow('back:');
    const fullName = windowCounterName('back:v2:full', 60_000, T0);
    const ttl = Number(await redis.cli('PTTL', fullName));
    // Windows before and after the full one: new counters, one window twice, and a check-only one.
    const r = await store.check([check({ key: 'new-a' }), check({ key: 'new-a', group: 1 }), check({ key: 'zero', hits: 0 }), full, check({ key: 'new-b' })]);
    expect(r.admitted).toBe(false);
    expect(r.over).toEqual([false, false, false, true, false]);
    expect(await redis.cli('--scan', '--pattern', 'back:v2:new*')).toBe('');
    expect(await redis.cli('--scan', '--pattern', 'back:v2:zero*')).toBe('');
    expect(await redis.cli('GET', fullName)).toBe('1');
    expect(Number(await redis.cli('PTTL', fullName))).toBeLessThanOrEqual(ttl);
    // An existing counter taken back keeps its count and its expiry.
    expect((await store.check([check({ key: 'new-a', limit: 5 })])).admitted).toBe(true);
    const aName = windowCounterName('back:v2:new-a', 1000, T0);
    expect((await store.check([check({ key: 'new-a', limit: 5 }), full])).admitted).toBe(false);
    expect(await redis.cli('GET', aName)).toBe('1');
    expect(Number(await redis.cli('PTTL', aName))).toBeGreaterThan(0);
  });

  it('a plain request Redis will not let count (out of memory, a key of another type) is decided from reads: refused, answered', async () => {
    const { store, full } = await withFullWindow('ro:');
    // A key of another type where a counter should be: read as absent, as an MGET reads it.
    await redis.cli('HSET', windowCounterName('ro:v2:hash', 1000, T0), 'f', '1');
    const refused = await store.check([check({ key: 'hash' }), full]);
    expect([refused.admitted, refused.over, refused.curr]).toEqual([false, [false, true], [0, 1]]);
    await expect(store.check([check({ key: 'hash' })])).rejects.toThrow(StoreKeyError);
    await redis.cli('CONFIG', 'SET', 'maxmemory-policy', 'noeviction');
    await redis.cli('CONFIG', 'SET', 'maxmemory', '1');
    try {
      // Redis refuses every write: a request over its limit needs none, and is answered; one with room fails.
      const over = await store.check([check({ key: 'fresh' }), full]);
      expect([over.admitted, over.over]).toEqual([false, [false, true]]);
      await expect(store.check([check({ key: 'fresh' })])).rejects.toThrow(/OOM/);
    } finally {
      await redis.cli('CONFIG', 'SET', 'maxmemory', '0');
    }
    expect(await redis.cli('--scan', '--pattern', 'ro:v2:fresh*')).toBe('');
  });

  it('a token bucket key lives until the bucket is full again, plus a second', async () => {
    const store = new RedisStore({ connection: parseRedisUrl(redis.url, 'single'), timeoutMs: 1000, keyPrefix: 'ttlb:', logger: silentLogger });
    opened.push(store);
    await store.waitReady(5000);
    // 1 per minute, 3 taken: full again in 3 minutes.
    await store.check([check({ key: 'tb', windowMs: 60_000, limit: 1, burst: 5, hits: 3 })]);
    const ttl = Number(await redis.cli('PTTL', 'ttlb:v2:tb'));
    expect(ttl).toBeGreaterThan(180_000);
    expect(ttl).toBeLessThanOrEqual(181_000);
  });
  it('a lone plain request runs the lean script (one INCRBY a window); with a check-only window, the full one', async () => {
    const store = new RedisStore({ connection: parseRedisUrl(redis.url, 'single'), timeoutMs: 1000, keyPrefix: 'lean:', logger: silentLogger });
    opened.push(store);
    await store.waitReady(5000);
    await redis.cli('SCRIPT', 'FLUSH');
    const loaded = async (): Promise<string> => redis.cli('SCRIPT', 'EXISTS', ONE_PLAIN_SCRIPT.sha, CHECK_SCRIPT.sha);
    const r = await store.check([check({ key: 'l', limit: 10 }), check({ key: 'l', windowMs: 60_000, limit: 100, group: 1 })]);
    expect([r.admitted, r.curr]).toEqual([true, [0, 0]]);
    expect(await loaded()).toBe('1\n0');
    await store.check([check({ key: 'l', limit: 10, hits: 0 })]);
    expect(await loaded()).toBe('1\n1');
  });

  it('a Redis that lost its scripts (SCRIPT FLUSH, a restart the client did not see) gets the script by EVAL, once', async () => {
    // A clock that stands still: the three checks count in one window however long the flush takes (on Redis's
    // clock they crossed into the next second once in a while, and the second read 0).
    const clock = new ManualClock(1_700_000_000_500);
    const store = new RedisStore({ connection: parseRedisUrl(redis.url, 'single'), timeoutMs: 1000, keyPrefix: 'flush:', logger: silentLogger, clock });
    opened.push(store);
    await store.waitReady(5000);
    expect((await store.check([check({ key: 'f', limit: 10 })])).curr).toEqual([0]);
    const evals = async (): Promise<number> => Number(/cmdstat_eval:calls=(\d+)/.exec(await redis.cli('INFO', 'commandstats'))?.[1] ?? 0);
    const before = await evals();
    await redis.cli('SCRIPT', 'FLUSH');
    // EVALSHA is refused (NOSCRIPT) having run nothing; EVAL runs the batch: counted once, not twice.
    expect((await store.check([check({ key: 'f', limit: 10 })])).curr).toEqual([1]);
    expect(await evals()).toBe(before + 1);
    expect((await store.check([check({ key: 'f', limit: 10 })])).curr).toEqual([2]);
    expect(await evals()).toBe(before + 1);
  });
});
