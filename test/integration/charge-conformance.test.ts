import { describe, expect, it } from 'vitest';
import { FROM_MONDAY } from '../../src/counters/calendar.js';
import { ManualClock } from '../../src/counters/clock.js';
import type { CheckResult, CounterCheck, Reservation } from '../../src/limits/check.js';
import { MAX_RESERVATIONS_PER_COUNTER } from '../../src/store/memory-reservations.js';
import type { Store } from '../../src/store/store.js';
import { counterCheck } from '../helpers/checks.js';
import { everyStore } from '../helpers/stores.js';

// Charges, reservations and calendar windows (issue 37), decided identically by the memory store and Redis's
// script: the same scenarios against both, on a clock the test moves.

const HOUR = 3_600_000;
const T0 = 1_800_000_000_000 - (1_800_000_000_000 % HOUR); // on an hour boundary
// Memory and one Redis, each store made fresh per test (helpers/stores.ts).
const { stores } = everyStore();

/** 1,000 an hour on one tenant, in charge mode. */
const budget = (over: Partial<CounterCheck> = {}): CounterCheck => counterCheck({ key: 'tenant', windowMs: HOUR, limit: 1000, charge: true, ...over });
const reservation = (id: string, ttlMs = 600_000): Reservation => ({ key: 'tenant:rsv', id, ttlMs });
const used = async (store: Store, c: CounterCheck): Promise<number> => (await store.check([{ ...c, hits: 0, reservation: undefined }])).curr[0]!;

describe.each(stores)('charges and reservations: %s', (_name, make) => {
  it("the new user's sequence: check, charge, a charge past the limit counted in full, then the check refused", async () => {
    const store = await make(new ManualClock(T0));
    const check = await store.check([budget({ hits: 0 })]);
    expect([check.admitted, check.curr[0]]).toEqual([true, 0]);
    const first = await store.check([budget({ hits: 600 })]);
    expect([first.admitted, first.over[0], first.counted?.[0]]).toEqual([true, false, 600]);
    const past = await store.check([budget({ hits: 600 })]);
    // Counted although it went past: the answer is truthful (over), and the debt stays.
    expect([past.admitted, past.over[0], past.curr[0], past.counted?.[0]]).toEqual([false, true, 600, 600]);
    const after = await store.check([budget({ hits: 0 })]);
    expect([after.admitted, after.curr[0]]).toEqual([false, 1200]);
  });

  it('a charge of exactly what is left is OK; the check after it is refused (at the limit, the budget is spent)', async () => {
    const store = await make(new ManualClock(T0));
    expect((await store.check([budget({ hits: 1000 })])).admitted).toBe(true);
    expect((await store.check([budget({ hits: 0 })])).admitted).toBe(false);
  });

  it('a token bucket in charge mode carries the debt and repays it at its rate', async () => {
    const clock = new ManualClock(T0);
    const store = await make(clock);
    // 10 a second, burst 10: a charge of 30 leaves 20 tokens owed, repaid in 2 s, then a check fits after 2.1 s.
    const tb = budget({ key: 'tb', windowMs: 1000, limit: 10, burst: 10 });
    const r = await store.check([{ ...tb, hits: 30 }]);
    expect([r.admitted, r.over[0]]).toEqual([false, true]);
    clock.set(T0 + 2000);
    expect((await store.check([{ ...tb, hits: 0 }])).admitted).toBe(false);
    clock.set(T0 + 2100);
    expect((await store.check([{ ...tb, hits: 0 }])).admitted).toBe(true);
  });

  it('a charge is counted even when another descriptor of the request refuses it, which counts nothing', async () => {
    const store = await make(new ManualClock(T0));
    const full = counterCheck({ key: 'other', windowMs: HOUR, limit: 0, group: 1 });
    const r = await store.check([budget({ hits: 5 }), full]);
    expect([r.admitted, r.counted]).toEqual([false, [5, 0]]);
    expect(await used(store, budget())).toBe(5);
  });

  it('20 concurrent reservations of 100 against 1,000 reserve exactly 10; settling each at 50 leaves 500 used', async () => {
    const store = await make(new ManualClock(T0));
    const ids = Array.from({ length: 20 }, (_, i) => `req-${i}`);
    const made = await Promise.all(ids.map((id) => store.check([budget({ hits: 100, reservation: reservation(id) })])));
    const events = made.map((r) => r.reservations?.[0]?.event);
    expect(events.filter((e) => e === 'made')).toHaveLength(10);
    expect(events.filter((e) => e === 'refused')).toHaveLength(10);
    expect(await used(store, budget())).toBe(1000);
    const settled = await Promise.all(ids.map((id) => store.check([budget({ hits: 50, reservation: reservation(id) })])));
    // The refused ones settle to nothing: a request refused costs nothing.
    expect(settled.map((r) => r.reservations?.[0]?.event).sort()).toEqual([...Array(10).fill('late'), ...Array(10).fill('settled')]);
    expect(await used(store, budget())).toBe(500);
    // A settlement sent twice counts once.
    await store.check([budget({ hits: 50, reservation: reservation('req-0') })]);
    expect(await used(store, budget())).toBe(500);
  });

  it('a settlement above its estimate is counted in full, past the limit too', async () => {
    const store = await make(new ManualClock(T0));
    const small = budget({ limit: 200 });
    expect((await store.check([{ ...small, hits: 100, reservation: reservation('a') }])).reservations?.[0]).toEqual({ event: 'made', estimate: 100 });
    const r = await store.check([{ ...small, hits: 300, reservation: reservation('a') }]);
    expect([r.reservations?.[0]?.event, r.counted?.[0], r.over[0]]).toEqual(['settled', 200, true]);
    expect(await used(store, small)).toBe(300);
  });

  it('a settlement in a later window gives nothing back there and charges only what exceeds the estimate', async () => {
    const clock = new ManualClock(T0 + HOUR - 1000);
    const store = await make(clock);
    await store.check([budget({ hits: 100, reservation: reservation('late-low') })]);
    await store.check([budget({ hits: 100, reservation: reservation('late-high') })]);
    clock.set(T0 + HOUR + 1000);
    expect((await store.check([budget({ hits: 30, reservation: reservation('late-low') })])).counted).toEqual([0]);
    expect((await store.check([budget({ hits: 160, reservation: reservation('late-high') })])).counted).toEqual([60]);
    expect(await used(store, budget())).toBe(60);
  });

  it("a flood of invented request ids fills one counter's 10,000 reservations and is refused there; settling still works", async () => {
    const store = await make(new ManualClock(T0));
    const big = budget({ key: 'flood', limit: 1e12 });
    const flood = (id: string, hits = 1) => store.check([{ ...big, hits, reservation: { key: 'flood:rsv', id, ttlMs: 60_000 } }]);
    for (let at = 0; at < MAX_RESERVATIONS_PER_COUNTER; at += 1000) {
      await Promise.all(Array.from({ length: 1000 }, (_, i) => flood(`f-${at + i}`)));
    }
    const refused = await flood('one-more');
    expect([refused.admitted, refused.reservations?.[0]?.event, refused.counted]).toEqual([false, 'full', [0]]);
    const settled = await flood('f-0', 5);
    expect([settled.reservations?.[0]?.event, settled.counted]).toEqual(['settled', [4]]);
    // Another counter is not touched by the flood.
    expect((await store.check([budget({ key: 'quiet', hits: 1, reservation: { key: 'quiet:rsv', id: 'q', ttlMs: 60_000 } })])).reservations?.[0]?.event).toBe(
      'made',
    );
  });

  it('an unsettled reservation expires after its ttl, charged at its estimate until a late settlement nets it', async () => {
    const clock = new ManualClock(T0);
    const store = await make(clock);
    await store.check([budget({ hits: 100, reservation: reservation('gone', 5000) })]);
    clock.set(T0 + 6000);
    // Forgotten unsettled (the store says so), its record kept one more ttl: a stream that outlived the ttl
    // settles against it (10 tokens, not estimate plus tokens).
    const r = await store.check([budget({ hits: 10, reservation: reservation('gone', 5000) })]);
    expect([r.reservations?.[0]?.event, r.counted, r.expired]).toEqual(['settled', [-90], 1]);
    expect(await used(store, budget())).toBe(10);
    // Past its second ttl nothing is kept: the id is new again.
    clock.set(T0 + 12_000);
    await store.check([budget({ hits: 7, reservation: reservation('unsettled', 5000) })]);
    clock.set(T0 + 30_000);
    expect((await store.check([budget({ hits: 5, reservation: reservation('unsettled', 5000) })])).reservations?.[0]?.event).toBe('made');
  });
});

describe.each(stores)('calendar and multiplied windows: %s', (_name, make) => {
  const month = (over: Partial<CounterCheck> = {}): CounterCheck => counterCheck({ key: 'month', windowMs: 30 * 86_400_000, limit: 2, calendar: 1, ...over });

  it('a calendar month resets on the first of the next month, 00:00 UTC (not 30 days on)', async () => {
    const clock = new ManualClock(Date.UTC(2027, 0, 31, 23, 59, 59, 999));
    const store = await make(clock);
    const rs: CheckResult[] = [];
    for (let i = 0; i < 3; i++) rs.push(await store.check([month()]));
    expect(rs.map((r) => r.admitted)).toEqual([true, true, false]);
    clock.set(Date.UTC(2027, 1, 1));
    const feb = await store.check([month()]);
    expect([feb.admitted, feb.curr[0]]).toEqual([true, 0]);
    // February has 28 days: still February on the 28th at 23:59, March on the 1st.
    clock.set(Date.UTC(2027, 1, 28, 23, 59));
    expect((await store.check([month()])).curr[0]).toBe(1);
    clock.set(Date.UTC(2027, 2, 1));
    expect((await store.check([month()])).curr[0]).toBe(0);
  });

  it('a calendar year turns on 1 January; a calendar week on Monday', async () => {
    const clock = new ManualClock(Date.UTC(2027, 11, 31, 12));
    const store = await make(clock);
    const year = month({ key: 'year', calendar: 12, limit: 1 });
    expect((await store.check([year])).admitted).toBe(true);
    expect((await store.check([year])).admitted).toBe(false);
    clock.set(Date.UTC(2028, 0, 1));
    expect((await store.check([year])).admitted).toBe(true);
    // 2028-01-02 is a Sunday, 2028-01-03 a Monday.
    const week = counterCheck({ key: 'week', windowMs: 7 * 86_400_000, limit: 1, calendar: FROM_MONDAY });
    clock.set(Date.UTC(2028, 0, 2, 23));
    expect((await store.check([week])).admitted).toBe(true);
    expect((await store.check([week])).admitted).toBe(false);
    clock.set(Date.UTC(2028, 0, 3));
    expect((await store.check([week])).admitted).toBe(true);
  });

  it('a calendar window is reset by its key, whatever its index (the admin API resets a client so)', async () => {
    const clock = new ManualClock(Date.UTC(2027, 4, 20));
    const store = await make(clock);
    const m = month({ key: 'reset-me', limit: 1 });
    expect((await store.check([m])).admitted).toBe(true);
    expect(await store.reset([{ key: 'reset-me', windowMs: m.windowMs, calendar: 1 }])).toBe(1);
    expect((await store.check([m])).admitted).toBe(true);
  });

  it('unit_multiplier 5 with unit minute is one 5-minute window, aligned to the epoch', async () => {
    const clock = new ManualClock(T0);
    const store = await make(clock);
    const five = counterCheck({ key: 'five', windowMs: 300_000, limit: 2 });
    expect((await store.check([five])).admitted).toBe(true);
    clock.set(T0 + 240_000); // four minutes on: the same window
    expect((await store.check([five])).admitted).toBe(true);
    expect((await store.check([five])).admitted).toBe(false);
    clock.set(T0 + 300_000);
    expect((await store.check([five])).admitted).toBe(true);
  });
});
