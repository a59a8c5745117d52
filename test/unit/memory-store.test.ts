import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/counters/clock.js';
import type { CounterCheck } from '../../src/limits/check.js';
import { MemoryStore } from '../../src/store/memory-store.js';
import { counterCheck } from '../helpers/checks.js';
import { SLIDING } from '../helpers/kinds.js';

const T0 = 1_800_000_000_000;
const check = counterCheck;

describe('memory store', () => {
  it('counts up to the limit in a window, then refuses without counting', async () => {
    const store = new MemoryStore({ clock: new ManualClock(T0) });
    const results = [];
    for (let i = 0; i < 5; i++) results.push(await store.check([check()]));
    expect(results.map((r) => r.admitted)).toEqual([true, true, true, false, false]);
    expect(results.map((r) => r.curr[0])).toEqual([0, 1, 2, 3, 3]);
    expect(store.peek('k', 1000)).toBe(3);
  });

  it('checks all windows of a request atomically', async () => {
    const store = new MemoryStore({ clock: new ManualClock(T0) });
    const windows = [check({ key: 'a', limit: 5 }), check({ key: 'b', limit: 1, group: 1 })];
    expect((await store.check(windows)).admitted).toBe(true);
    const second = await store.check(windows);
    expect(second.admitted).toBe(false);
    expect(second.over).toEqual([false, true]);
    expect(store.peek('a', 1000)).toBe(1);
  });

  it('counts a shadow group only when it has room, and never lets it block', async () => {
    const store = new MemoryStore({ clock: new ManualClock(T0) });
    const windows = [check({ key: 'enforced', limit: 10 }), check({ key: 'shadow', limit: 1, group: 1, shadow: true })];
    await store.check(windows);
    const r = await store.check(windows);
    expect(r.admitted).toBe(true);
    expect(r.over).toEqual([false, true]);
    expect(store.peek('enforced', 1000)).toBe(2);
    expect(store.peek('shadow', 1000)).toBe(1);
  });

  it('starts a new window at the epoch-aligned boundary', async () => {
    const clock = new ManualClock(T0 + 999);
    const store = new MemoryStore({ clock });
    for (let i = 0; i < 3; i++) await store.check([check()]);
    expect((await store.check([check()])).admitted).toBe(false);
    clock.set(T0 + 1000);
    expect((await store.check([check()])).admitted).toBe(true);
  });

  it('reclaims expired windows, a fixed one a second after its end (as Redis keeps it: read as the previous window)', async () => {
    const clock = new ManualClock(T0);
    const store = new MemoryStore({ clock });
    for (let i = 0; i < 100; i++) await store.check([check({ key: `k${i}` })]);
    expect(store.size).toBe(100);
    clock.advance(1000);
    // RLQS reads what RLS admitted in the window just ended (src/rlqs/quota/fleet-capacity.ts): a sliding read of it.
    expect((await store.check([check({ key: 'k0', hits: 0, kind: SLIDING, limit: 1000 })])).prev).toEqual([1]);
    clock.advance(1000);
    await store.check([check({ key: 'fresh', hits: 0 })]);
    expect(store.size).toBe(0);
  });

  it('keeps the count of the window before when a fixed window turns, for a reader that reads it as sliding', async () => {
    const clock = new ManualClock(T0);
    const store = new MemoryStore({ clock });
    for (let i = 0; i < 3; i++) await store.check([check({ key: 'k' })]);
    clock.advance(1000);
    await store.check([check({ key: 'k' })]); // the window turns: the series now counts the new one
    const read = await store.check([check({ key: 'k', hits: 0, kind: SLIDING, limit: 1000 })]);
    expect([read.curr, read.prev]).toEqual([[1], [3]]);
  });

  it('keeps a sliding window for one more window, where it counts as the previous one', async () => {
    const clock = new ManualClock(T0);
    const store = new MemoryStore({ clock });
    const s = check({ kind: SLIDING, limit: 4 });
    for (let i = 0; i < 4; i++) await store.check([s]);
    clock.advance(1500); // half-way through the next window: previous 4 weigh 2
    const r = await store.check([s]);
    expect(r.prev[0]).toBe(4);
    expect(r.admitted).toBe(true);
    // One series per counter carries both windows; it lives until the end of the window after its last.
    expect(store.size).toBe(1);
    clock.advance(1000);
    await store.check([check({ key: 'other', hits: 0 })]);
    expect(store.size).toBe(1);
    clock.advance(1000);
    await store.check([check({ key: 'other', hits: 0 })]);
    expect(store.size).toBe(0);
  });

  it('holds at most maxCounters, evicting the oldest of those counted once, and counting evictions', async () => {
    const warnings: unknown[] = [];
    const store = new MemoryStore({ clock: new ManualClock(T0), maxCounters: 10, logger: { warn: (o: unknown) => warnings.push(o) } as never });
    for (let i = 0; i < 25; i++) await store.check([check({ key: `k${i}` })]);
    expect(store.size).toBe(10);
    expect(store.evictions).toBe(15);
    expect(store.peek('k0', 1000)).toBe(0);
    expect(store.peek('k24', 1000)).toBe(1);
    expect(warnings).toHaveLength(1);
  });

  // Issue 22, item 1: oldest-first eviction let 25,000 invented tokens reset a real client's hourly count.
  it('a flood of 30,000 invented tokens at maxCounters 20,000 leaves a client that spent its quota over its limit', async () => {
    const clock = new ManualClock(T0);
    const store = new MemoryStore({ clock, maxCounters: 20_000 });
    const hour = (key: string): CounterCheck => check({ key, windowMs: 3_600_000, limit: 10 });
    for (let i = 0; i < 10; i++) expect(store.check([hour('spent')]).admitted).toBe(true);
    expect(store.check([hour('spent')]).admitted).toBe(false);
    // Some other real clients, each counted a few times, then the flood (each invented token counted once).
    for (let c = 0; c < 100; c++) for (let i = 0; i < 3; i++) store.check([hour(`regular-${c}`)]);
    for (let i = 0; i < 30_000; i++) {
      store.check([hour(`invented-${i}`)]);
      if (i % 1000 === 0) clock.advance(1000);
    }
    expect(store.size).toBe(20_000);
    expect(store.evictions).toBeGreaterThanOrEqual(10_000);
    expect(store.check([hour('spent')]).admitted).toBe(false);
    expect(store.peek('spent', 3_600_000)).toBe(10);
    for (let c = 0; c < 100; c++) expect(store.peek(`regular-${c}`, 3_600_000)).toBe(3);
  });

  it('with nothing on probation, evicts the smallest count among the oldest', async () => {
    const store = new MemoryStore({ clock: new ManualClock(T0), maxCounters: 3 });
    const hour = (key: string): CounterCheck => check({ key, windowMs: 3_600_000, limit: 100 });
    for (const [key, n] of [
      ['a', 9],
      ['b', 2],
      ['c', 5],
    ] as const)
      for (let i = 0; i < n; i++) store.check([hour(key)]);
    store.check([hour('d')]); // full: b (2) goes, not a (the oldest, 9)
    expect(['a', 'b', 'c', 'd'].map((k) => store.peek(k, 3_600_000))).toEqual([9, 0, 5, 1]);
  });

  it("a full store never evicts a counter the same check just created: a new client's two windows both count", async () => {
    const store = new MemoryStore({ clock: new ManualClock(T0), maxCounters: 4 });
    const two = (key: string): CounterCheck[] => [
      check({ key: `${key}:s`, windowMs: 60_000, limit: 100 }),
      check({ key: `${key}:h`, windowMs: 3_600_000, limit: 100, group: 0 }),
    ];
    for (const key of ['a', 'b']) for (let i = 0; i < 3; i++) store.check(two(key)); // full, nothing on probation
    for (let i = 0; i < 3; i++) store.check(two('new'));
    expect([store.peek('new:s', 60_000), store.peek('new:h', 3_600_000)]).toEqual([3, 3]);
    // A store smaller than one request still answers (it evicts the request's own oldest window).
    const tiny = new MemoryStore({ clock: new ManualClock(T0), maxCounters: 1 });
    expect(tiny.check(two('x')).admitted).toBe(true);
    expect(tiny.size).toBe(1);
  });

  it('keeps no trace of an evicted or reset counter (hour-long windows, far past maxCounters)', async () => {
    const store = new MemoryStore({ clock: new ManualClock(T0), maxCounters: 100 });
    for (let i = 0; i < 5000; i++) await store.check([check({ key: `k${i}`, windowMs: 3_600_000 })]);
    await store.reset([{ key: 'k4999', windowMs: 3_600_000 }]);
    expect(store.size).toBe(99);
    expect(store.indexedKeys).toBe(99);
  });

  it('is exact under concurrent checks', async () => {
    const store = new MemoryStore({ clock: new ManualClock(T0) });
    const results = await Promise.all(Array.from({ length: 200 }, () => store.check([check({ limit: 37 })])));
    expect(results.filter((r) => r.admitted)).toHaveLength(37);
  });
});
