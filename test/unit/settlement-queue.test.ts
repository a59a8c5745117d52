import { describe, expect, it } from 'vitest';
import { StoreConnectionError, StoreDegradedError, StoreKeyError, StoreMovingError, StoreUnavailableError } from '../../src/errors.js';
import type { CheckResult, CounterCheck } from '../../src/limits/check.js';
import { PolicyStore } from '../../src/store/failure-policy.js';
import { MAX_WAITING_CHECKS, MAX_WAITING_PER_COUNTER, SettlementQueue } from '../../src/store/settlement-queue.js';
import { counterCheck, slotOp } from '../helpers/checks.js';
import { SLOTS } from '../helpers/kinds.js';
import { silentLogger } from '../helpers/service.js';
import { within } from '../helpers/time.js';

// The queue of stream-end settlements the store could not take: only settlements, bounded per counter and in
// all (one tenant's outage traffic never pushes out another's), sent again once the store answers.

const settlement = (counter: string, id: string, settles = true): CounterCheck[] => [
  counterCheck({ key: `{${counter}}`, charge: true, hits: 10, reservation: { key: `{${counter}}:rsv`, id, ttlMs: 60_000, settles } }),
];
const ok: CheckResult = { nowMs: 0, admitted: true, curr: [0], prev: [0], over: [false] };

describe('SettlementQueue', () => {
  it('holds settlements only: a request phase or a plain charge is never kept', () => {
    expect(SettlementQueue.holds(settlement('a', 'x'))).toBe(true);
    expect(SettlementQueue.holds(settlement('a', 'x', false))).toBe(false);
    expect(SettlementQueue.holds([counterCheck({ charge: true, hits: 5 })])).toBe(false);
    expect(SettlementQueue.holds([])).toBe(false);
  });

  it(`keeps ${MAX_WAITING_PER_COUNTER} checks per counter (past it, drops); at ${MAX_WAITING_CHECKS} in all the biggest counter pays`, async () => {
    const sent: string[] = [];
    let away = true;
    const store = {
      check: (checks: readonly CounterCheck[]) => {
        if (away) return Promise.reject(new StoreConnectionError('away'));
        sent.push(checks[0]!.reservation!.key);
        return Promise.resolve(ok);
      },
    };
    const q = new SettlementQueue(store, 10);
    for (let i = 0; i < MAX_WAITING_PER_COUNTER + 5; i++) q.keep(settlement('greedy', `g-${i}`));
    expect([q.size, q.dropped]).toEqual([MAX_WAITING_PER_COUNTER, 5]);
    // Another tenant still gets room; then invented tenants of up to 999 each fill the queue in all.
    expect(q.keep(settlement('quiet', 'q-1'))).toBe(true);
    for (let c = 0; q.held < MAX_WAITING_CHECKS; c++) for (let i = 0; i < 999 && q.held < MAX_WAITING_CHECKS; i++) q.keep(settlement(`c-${c}`, `x-${i}`));
    expect(q.held).toBe(MAX_WAITING_CHECKS);
    // A newcomer past the bound in all is kept: the counter holding the most ('greedy', 1,000) drops its oldest.
    expect(q.keep(settlement('late', 'y'))).toBe(true);
    expect([q.held, q.dropped]).toEqual([MAX_WAITING_CHECKS, 6]);
    away = false;
    await within(5000, () => q.size === 0, 'sent');
    const by = (key: string) => sent.filter((k) => k === `{${key}}:rsv`).length;
    expect([by('greedy'), by('quiet'), by('late'), by('c-0')]).toEqual([MAX_WAITING_PER_COUNTER - 1, 1, 1, 999]);
    q.close();
  });

  it('sends again while the store is away, then all once it answers; a key refusal is dropped, not retried', async () => {
    let away = true;
    const sent: string[] = [];
    const store = {
      check: (checks: readonly CounterCheck[]) => {
        if (away) return Promise.reject(new StoreConnectionError('away'));
        const id = checks[0]!.reservation!.id;
        sent.push(id);
        return id === 'bad' ? Promise.reject(new StoreKeyError('WRONGTYPE')) : Promise.resolve(ok);
      },
    };
    const q = new SettlementQueue(store, 10);
    for (const id of ['a', 'bad', 'b']) q.keep(settlement('t', id));
    await within(2000, () => q.size === 3, 'kept');
    away = false;
    await within(2000, () => q.size === 0, 'sent');
    expect([sent, q.dropped]).toEqual([['a', 'bad', 'b'], 1]);
    q.close();
  });

  it('counts a call by the checks it holds: 64 give-backs in one call weigh 64', () => {
    const q = new SettlementQueue({ check: () => ok }, 60_000);
    const wide = (c: string, i: number) => Array.from({ length: 64 }, (_, j) => slotCheck(c, -1, `${i}-${j}`));
    let kept = 0;
    for (let i = 0; i < 20; i++) if (q.keep(wide('flood', i))) kept++;
    expect(kept).toBe(Math.floor(MAX_WAITING_PER_COUNTER / 64));
    expect(q.held).toBe(kept * 64);
    for (let c = 0; c < 1000; c++) q.keep(wide(`f-${c}`, 0));
    // Full: a wide call more is kept, and the counter holding the most ('flood', 960) gives up its oldest.
    expect(q.held).toBeGreaterThan(MAX_WAITING_CHECKS - 64);
    const before = q.dropped;
    expect(q.keep(wide('one-more', 0))).toBe(true);
    expect(q.dropped).toBe(before + 1);
    expect(q.held).toBeLessThanOrEqual(MAX_WAITING_CHECKS);
    expect(q.keep(settlement('quiet', 'q'))).toBe(true);
    q.close();
  });

  it('replays a slice of at most 256 checks at a time, live calls between slices', async () => {
    let away = true;
    let inFlight = 0;
    let most = 0;
    let slices = 0;
    const store = {
      check: async (checks: readonly CounterCheck[]) => {
        if (away) throw new StoreConnectionError('away');
        if (inFlight === 0) slices++;
        inFlight += checks.length;
        most = Math.max(most, inFlight);
        await new Promise((r) => setImmediate(r));
        inFlight -= checks.length;
        return ok;
      },
    };
    const q = new SettlementQueue(store, 10);
    for (let c = 0; c < 150; c++) q.keep(Array.from({ length: 64 }, (_, j) => slotCheck(`c${c}`, -1, `id-${j}`)));
    expect(q.held).toBe(150 * 64);
    await within(2000, () => slices === 0 && q.size === 150, 'kept while away');
    away = false;
    await within(10_000, () => q.size === 0, 'sent');
    expect(most).toBeLessThanOrEqual(256);
    expect(slices).toBeGreaterThanOrEqual(Math.ceil((150 * 64) / 256));
    expect(q.held).toBe(0);
    q.close();
  });
});

const slotCheck = (counter: string, hits: number, id: string): CounterCheck =>
  counterCheck({ key: `{${counter}}:slots`, kind: SLOTS, charge: true, ...slotOp(hits), windowMs: 60_000, limit: 5, slots: { id } });

describe('PolicyStore: a take of slots whose answer never came', () => {
  const failing = (err: Error) => ({
    kind: 'fake',
    check: () => Promise.reject(err),
    health: () => ({ degraded: false, reason: undefined }),
    reset: async () => 0,
    close: async () => undefined,
  });

  it('keeps its give-back when the call may have run (a timeout, a lost connection), not when it cannot have', async () => {
    const cases: [Error, number][] = [
      [new StoreUnavailableError('redis: timed out'), 1],
      [new StoreConnectionError('redis: Connection is closed.'), 1],
      [new StoreDegradedError('redis unavailable'), 0],
      [new StoreMovingError(), 0],
      [new StoreKeyError('WRONGTYPE'), 0],
    ];
    for (const [err, kept] of cases) {
      const store = new PolicyStore(failing(err), 'allow', silentLogger);
      await expect(store.check([slotCheck('t', 1, 'r1')])).rejects.toBe(err);
      expect([err.constructor.name, store.settlements.size]).toEqual([err.constructor.name, kept]);
      // A take by count (no id) has nothing to name: never kept.
      await expect(store.check([slotCheck('t', 1, undefined as unknown as string)].map((c) => ({ ...c, slots: { id: undefined } })))).rejects.toBe(err);
      expect(store.settlements.size).toBe(kept);
      await store.close();
    }
  });

  it('the kept give-back is the take, given back', () => {
    const take = [slotCheck('t', 2, 'r1'), counterCheck({ key: 'plain' })];
    expect(SettlementQueue.giveBackOf(take)).toEqual([{ ...take[0], op: 'giveBack', hits: 2 }]);
    expect(SettlementQueue.giveBackOf([counterCheck()])).toBeUndefined();
  });
});

describe('SettlementQueue: calls dropped to make room', () => {
  it('let go of what they hold as the flood comes, not at the next send', () => {
    const q = new SettlementQueue({ check: () => ok }, 60_000);
    for (let c = 0; c < 200_000; c++) q.keep(settlement(`flood-${c % 500}`, `x-${c}`));
    expect(q.held).toBe(MAX_WAITING_CHECKS);
    // The queue's own array of calls stays within twice the bound however many were dropped.
    const waiting = (q as unknown as { waiting: unknown[] }).waiting.length;
    expect(waiting).toBeLessThanOrEqual(2 * MAX_WAITING_CHECKS + 1);
    q.close();
  });
});
