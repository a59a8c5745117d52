import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/counters/clock.js';
import { storeKey } from '../../src/counters/keys.js';
import type { CheckResult, CounterCheck } from '../../src/limits/check.js';
import { MAX_ENDED_PER_COUNTER } from '../../src/store/memory-reservations.js';
import { MemoryStore } from '../../src/store/memory-store.js';
import { parseRedisUrl } from '../../src/store/redis-connection.js';
import { RedisStore } from '../../src/store/redis-store.js';
import type { Store } from '../../src/store/store.js';
import { counterCheck } from '../helpers/checks.js';
import { type RedisCluster, type RedisServer, startRedis, startRedisCluster } from '../helpers/redis.js';
import { silentLogger } from '../helpers/service.js';

// The reservation table bounds open reservations only (issue 51): a busy tenant is never refused by its own
// settled or refused records, a retry storm ends with its window, one tenant's flood leaves another's
// reservations alone, and a stream's end is charged once whether its reservation is open, forgotten or was
// never made. The same scenarios on the memory store, one Redis, and a 3-master Cluster.

const MINUTE = 60_000;
const HOUR = 3_600_000;
const T0 = 1_800_000_000_000 - (1_800_000_000_000 % HOUR);
let redis: RedisServer;
let cluster: RedisCluster;
const opened: Store[] = [];
let seq = 0;
const prefixes = new Map<Store, string>();

beforeAll(async () => {
  [redis, cluster] = await Promise.all([startRedis(), startRedisCluster()]);
}, 60_000);
afterAll(async () => {
  for (const s of opened) await s.close();
  await Promise.all([redis?.stop(), cluster?.stop()]);
});

async function redisStore(url: string, type: 'single' | 'cluster', clock: ManualClock): Promise<Store> {
  const keyPrefix = `rt${++seq}:`;
  const s = new RedisStore({ connection: parseRedisUrl(url, type), timeoutMs: 5000, keyPrefix, logger: silentLogger, clock });
  opened.push(s);
  prefixes.set(s, keyPrefix);
  expect(await s.waitReady(10_000)).toBe(true);
  return s;
}

const stores: [string, (clock: ManualClock) => Promise<Store>][] = [
  ['memory', async (clock) => new MemoryStore({ clock })],
  ['redis', (clock) => redisStore(redis.url, 'single', clock)],
  ['cluster', (clock) => redisStore(cluster.url, 'cluster', clock)],
];

/** A tenant and model's hour, in charge mode, with reservations by request id. Keys carry a Cluster hash
 * tag, as every counter key does (counters/keys.ts). */
const hour = (name: string, id: string, hits: number, over: Partial<CounterCheck> = {}): CounterCheck => {
  const key = name.includes('{') ? name : `{${name}}`;
  return counterCheck({ key, windowMs: HOUR, limit: 1_000_000, charge: true, hits, reservation: { key: `${key}:rsv`, id, ttlMs: 600_000 }, ...over });
};
const settling = (c: CounterCheck): CounterCheck => ({ ...c, reservation: { ...c.reservation!, settles: true } });
const used = async (store: Store, c: CounterCheck): Promise<number> => (await store.check([{ ...c, hits: 0, reservation: undefined }])).curr[0]!;
const events = (rs: CheckResult[]): Record<string, number> => {
  const out: Record<string, number> = {};
  for (const r of rs) {
    const e = r.reservations?.[0]?.event ?? 'none';
    out[e] = (out[e] ?? 0) + 1;
  }
  return out;
};
async function inWaves<T>(n: number, wave: number, one: (i: number) => T | Promise<T>): Promise<T[]> {
  const out: T[] = [];
  for (let at = 0; at < n; at += wave) out.push(...(await Promise.all(Array.from({ length: Math.min(wave, n - at) }, (_, i) => one(at + i)))));
  return out;
}

describe.each(stores)('the reservation table: %s', (_name, make) => {
  it('10,500 requests of a tenant with room, each reserved then settled, are all admitted', async () => {
    const store = await make(new ManualClock(T0));
    const made = await inWaves(10_500, 750, async (i) => {
      const r = await store.check([hour('busy', `req-${i}`, 2000, { limit: 1e9 })]);
      await store.check([settling(hour('busy', `req-${i}`, 1500, { limit: 1e9 }))]);
      return r;
    });
    expect(events(made)).toEqual({ made: 10_500 });
    expect(await used(store, hour('busy', '', 0))).toBe(10_500 * 1500);
  }, 60_000);

  it("a retry storm in a spent minute does not outlive it: the next minute's first request is admitted", async () => {
    const clock = new ManualClock(T0);
    const store = await make(clock);
    const minute = (id: string) => hour('storm', id, 10, { windowMs: MINUTE, limit: 100 });
    await store.check([{ ...minute(''), reservation: undefined, hits: 100 }]);
    const refused = await inWaves(10_000, 1000, (i) => store.check([minute(`retry-${i}`)]));
    expect(events(refused)).toEqual({ refused: 10_000 });
    clock.set(T0 + MINUTE);
    const next = await store.check([minute('after-the-storm')]);
    expect([next.admitted, next.reservations?.[0]?.event, next.curr[0]]).toEqual([true, 'made', 0]);
  }, 60_000);

  it('a stream whose request phase never reached the store is charged in full, once, past the limit too', async () => {
    const store = await make(new ManualClock(T0));
    const small = (id: string, hits: number) => settling(hour('dead', id, hits, { limit: 1000 }));
    const first = await store.check([small('never-reserved', 5000)]);
    expect([first.reservations?.[0]?.event, first.counted, first.over[0]]).toEqual(['unreserved', [5000], true]);
    const replay = await store.check([small('never-reserved', 5000)]);
    expect([replay.reservations?.[0]?.event, replay.counted]).toEqual(['late', [0]]);
    expect(await used(store, small('', 0))).toBe(5000);
  });

  it('a settlement after the ttl is netted against the estimate; one of a refused reservation costs nothing', async () => {
    const clock = new ManualClock(T0);
    const store = await make(clock);
    const c = (id: string, hits: number) => hour('late', id, hits, { limit: 3000, reservation: { key: '{late}:rsv', id, ttlMs: 5000 } });
    expect((await store.check([c('slow', 2000)])).reservations?.[0]?.event).toBe('made');
    expect((await store.check([c('too-big', 2000)])).reservations?.[0]?.event).toBe('refused');
    // The refused request's stream ends at once (Envoy answered it 429): nothing is charged.
    const refused = await store.check([settling(c('too-big', 2500))]);
    expect([refused.reservations?.[0]?.event, refused.counted]).toEqual(['late', [0]]);
    clock.set(T0 + 7000);
    const late = await store.check([settling(c('slow', 1800))]);
    expect([late.reservations?.[0]?.event, late.counted]).toEqual(['settled', [-200]]);
    expect(await used(store, c('', 0))).toBe(1800);
  });

  it(`a counter keeps at most ${MAX_ENDED_PER_COUNTER} ended records, the oldest dropped; an open reservation is never dropped`, async () => {
    const store = await make(new ManualClock(T0));
    const open = await store.check([hour('ended', 'kept-open', 100)]);
    expect(open.reservations?.[0]?.event).toBe('made');
    await inWaves(MAX_ENDED_PER_COUNTER + 500, 500, async (i) => {
      await store.check([hour('ended', `e-${i}`, 1)]);
      await store.check([settling(hour('ended', `e-${i}`, 1))]);
    });
    if (store instanceof MemoryStore) expect(store.reservations.size).toBe(MAX_ENDED_PER_COUNTER + 1);
    else expect(await zcard(store, '{ended}:rsv.done')).toBe(MAX_ENDED_PER_COUNTER);
    const settled = await store.check([settling(hour('ended', 'kept-open', 40))]);
    expect([settled.reservations?.[0]?.event, settled.counted]).toEqual(['settled', [-60]]);
  }, 60_000);

  it('a request reserving on a month and an hour in different slots settles both exactly', async () => {
    const store = await make(new ManualClock(T0));
    const both = (id: string, hits: number, settles = false) => {
      const month = hour('{acme}month', id, hits, { windowMs: 30 * 86_400_000, limit: 5000, group: 0 });
      const h = hour('{acme-gpt}hour', id, hits, { limit: 100_000, group: 1 });
      return settles ? [settling(month), settling(h)] : [month, h];
    };
    const rs = await inWaves(50, 50, (i) => store.check(both(`r-${i}`, 2000)));
    // Two fit the month's 5,000; the others reserve nothing anywhere.
    expect(rs.filter((r) => r.admitted)).toHaveLength(2);
    await inWaves(50, 50, (i) => store.check(both(`r-${i}`, 2400, true)));
    expect(await used(store, both('', 0)[0]!)).toBe(4800);
    expect(await used(store, both('', 0)[1]!)).toBe(4800);
  });
});

/** How many members a sorted set of a Redis store holds (its ended records), from whichever server has it. */
async function zcard(store: Store, key: string): Promise<number> {
  const name = storeKey(prefixes.get(store)!, key);
  for (const r of [redis, ...cluster.nodes]) {
    const n = Number((await r.cli('zcard', name)).trim());
    if (n > 0) return n;
  }
  return 0;
}

describe('one tenant cannot refuse another', () => {
  it("a flood of refused ids across a tenant's counters leaves another tenant's new reservation made (memory's bound in all)", async () => {
    const clock = new ManualClock(T0);
    const store = new MemoryStore({ clock, maxReservations: 2000 });
    const spent = (model: number, id: string) => hour(`flood-tenant|m${model}`, id, 10, { limit: 5 });
    await inWaves(100 * 60, 1000, (i) => store.check([spent(i % 100, `invented-${i}`)]));
    const other = await store.check([hour('quiet-tenant|m', 'a-real-request', 10)]);
    expect([other.admitted, other.reservations?.[0]?.event]).toEqual([true, 'made']);
    expect(store.reservations.size).toBeLessThanOrEqual(2000);
  });

  it('open reservations of 200 invented tenants filling the shared bound: a new tenant is made, the biggest counter pays', async () => {
    const clock = new ManualClock(T0);
    const store = new MemoryStore({ clock, maxReservations: 1000 });
    // A quiet tenant holds 3 open; then 200 invented tenants open 5 each: 1,003 asked, 1,000 may be open.
    for (const id of ['q1', 'q2', 'q3']) await store.check([hour('quiet|m', id, 10)]);
    await inWaves(1000, 500, (i) => store.check([hour(`invented-${i % 200}|m`, `x-${i}`, 10)]));
    const other = await store.check([hour('newcomer|m', 'first', 10)]);
    expect([other.admitted, other.reservations?.[0]?.event]).toEqual([true, 'made']);
    expect(store.reservations.evictions).toBe(4);
    // The quiet tenant's three are still open: each settles against its estimate, none is an unreserved charge.
    const settled = await Promise.all(['q1', 'q2', 'q3'].map((id) => store.check([hour('quiet|m', id, 7)])));
    expect(settled.map((r) => r.reservations?.[0]?.event)).toEqual(['settled', 'settled', 'settled']);
  });
});
