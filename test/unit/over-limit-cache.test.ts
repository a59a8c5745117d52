import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/counters/clock.js';
import type { CheckResult, CounterCheck } from '../../src/limits/check.js';
import { MemoryStore } from '../../src/store/memory-store.js';
import { OverLimitCache } from '../../src/store/over-limit-cache.js';
import type { Maybe, Store } from '../../src/store/store.js';
import { counterCheck } from '../helpers/checks.js';

const T0 = 1_800_000_000_000;
const check = (over: Partial<CounterCheck> = {}): CounterCheck => counterCheck({ limit: 2, ...over });

/** Counts the calls that reach the real store underneath. */
class Counting implements Store {
  readonly kind = 'counting';
  calls = 0;
  constructor(private readonly inner: Store) {}
  check(c: readonly CounterCheck[]): Maybe<CheckResult> {
    this.calls++;
    return this.inner.check(c);
  }
  health() {
    return this.inner.health();
  }
  reset(w: readonly { key: string; windowMs: number }[]) {
    return this.inner.reset(w);
  }
  close() {
    return this.inner.close();
  }
}

function setup() {
  const clock = new ManualClock(T0);
  const inner = new Counting(new MemoryStore({ clock }));
  return { clock, inner, cache: new OverLimitCache(inner, clock) };
}

describe('over-limit cache', () => {
  it('answers a full window locally until it ends', async () => {
    const { clock, inner, cache } = setup();
    for (let i = 0; i < 3; i++) await cache.check([check()]);
    expect(inner.calls).toBe(3);
    const local = await cache.check([check()]);
    expect(local).toMatchObject({ admitted: false, over: [true], curr: [2], source: 'cache', nowMs: T0 });
    expect(inner.calls).toBe(3);
    clock.set(T0 + 1000);
    expect((await cache.check([check()])).admitted).toBe(true);
    expect(inner.calls).toBe(4);
  });

  it("a token bucket: answered locally only until the request's tokens are back, and only for as many", async () => {
    const { clock, inner, cache } = setup();
    // 10 per second (100 ms a token), burst 2.
    const b = (over: Partial<CounterCheck> = {}) => check({ key: 'tb', limit: 10, burst: 2, ...over });
    for (let i = 0; i < 2; i++) await cache.check([b()]);
    expect((await cache.check([b({ hits: 2 })])).admitted).toBe(false);
    expect(inner.calls).toBe(3);
    clock.set(T0 + 99);
    const local = await cache.check([b({ hits: 2 })]);
    // The debt reported is the one last read (2000 ticks at T0) paid back since: 2000 − 99 × 10.
    expect(local).toMatchObject({ admitted: false, over: [true], curr: [1010], source: 'cache' });
    expect(inner.calls).toBe(3);
    // One token is back at T0 + 100; the entry, for two, must not answer a request for one.
    clock.set(T0 + 100);
    expect((await cache.check([b()])).admitted).toBe(true);
    expect(inner.calls).toBe(4);
  });

  it('asks the store again when the limit changed (tier or reload)', async () => {
    const { inner, cache } = setup();
    for (let i = 0; i < 3; i++) await cache.check([check()]);
    expect((await cache.check([check({ limit: 5 })])).admitted).toBe(true);
    expect(inner.calls).toBe(4);
  });

  it('never answers for shadow windows or descriptors it knows nothing about', async () => {
    const { inner, cache } = setup();
    for (let i = 0; i < 3; i++) await cache.check([check()]);
    await cache.check([check(), check({ key: 'other', group: 1 })]);
    await cache.check([check(), check({ key: 'shadow', group: 1, shadow: true })]);
    expect(inner.calls).toBe(5);
  });

  it('keeps the other windows of the descriptor as last seen', async () => {
    const { cache } = setup();
    const pair = [check(), check({ key: 'k-hour', windowMs: 3_600_000, limit: 100 })];
    for (let i = 0; i < 3; i++) await cache.check(pair);
    const local = await cache.check(pair);
    expect(local.source).toBe('cache');
    expect(local.curr).toEqual([2, 2]);
    expect(local.over).toEqual([true, false]);
  });
});
