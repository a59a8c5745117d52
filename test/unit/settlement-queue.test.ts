import { describe, expect, it } from 'vitest';
import { StoreConnectionError, StoreKeyError } from '../../src/errors.js';
import { MAX_WAITING_PER_COUNTER, MAX_WAITING_SETTLEMENTS, SettlementQueue } from '../../src/store/settlement-queue.js';
import type { CheckResult, CounterCheck } from '../../src/store/store.js';
import { counterCheck } from '../helpers/checks.js';
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

  it(`keeps ${MAX_WAITING_PER_COUNTER} per counter and ${MAX_WAITING_SETTLEMENTS} in all; past either, drops and counts`, () => {
    const q = new SettlementQueue({ check: () => ok }, 60_000);
    for (let i = 0; i < MAX_WAITING_PER_COUNTER + 5; i++) q.keep(settlement('greedy', `g-${i}`));
    expect([q.size, q.dropped]).toEqual([MAX_WAITING_PER_COUNTER, 5]);
    // Another tenant still gets room.
    expect(q.keep(settlement('quiet', 'q-1'))).toBe(true);
    for (let c = 0; q.size < MAX_WAITING_SETTLEMENTS; c++) q.keep(settlement(`c-${c}`, 'x'));
    expect(q.keep(settlement('late', 'y'))).toBe(false);
    expect(q.dropped).toBe(6);
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
});
