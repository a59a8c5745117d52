import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/counters/clock.js';
import type { CounterCheck } from '../../src/limits/check.js';
import { MemoryStore } from '../../src/store/memory-store.js';
import { counterCheck, slotOp } from '../helpers/checks.js';
import { SLOTS } from '../helpers/kinds.js';

// The memory store's bound of in-flight holders is shared by every counter: a client that invents tenants and
// fills it must never refuse another tenant's take. Past the bound, the holder whose lease ends soonest in a
// counter that holds the most makes room (memory-slots.ts), counted and logged.

const T0 = 1_800_000_000_000;
const DAY = 86_400_000;
const take = (tenant: string, id: string, hits = 1): CounterCheck =>
  counterCheck({ key: `{${tenant}}:slots`, windowMs: DAY, limit: 64, ...slotOp(hits), kind: SLOTS, charge: true, slots: { id } });

describe('MemorySlots: one client filling the holder bound', () => {
  it('a tenant that took no part is admitted on its first take; the flood pays, the quiet tenant keeps its slots', async () => {
    const warnings: unknown[] = [];
    const clock = new ManualClock(T0);
    const store = new MemoryStore({ clock, maxSlotHolders: 1000, logger: { warn: (o: unknown) => warnings.push(o) } });
    // A quiet tenant holds 3 slots; then 100 invented tenants take 10 each, past the bound of 1,000.
    for (const id of ['q1', 'q2', 'q3']) expect(store.check([take('quiet', id)]).admitted).toBe(true);
    for (let t = 0; t < 100; t++) for (let i = 0; i < 10; i++) store.check([take(`flood-${t}`, `${t}-${i}`)]);
    expect(store.slots.size.holders).toBe(1000);
    // The newcomer is admitted, and stays under the bound.
    const first = store.check([take('newcomer', 'n1')]);
    expect(first.admitted).toBe(true);
    expect(store.slots.size.holders).toBe(1000);
    expect(store.slots.evictions).toBe(3 + 1);
    // The quiet tenant's 3 slots are all still held: the room came from the flood's counters of 10.
    expect(['q1', 'q2', 'q3'].map((id) => store.slots.holding(take('quiet', id), T0))).toEqual([1, 1, 1]);
    // Logged once a minute, not once per eviction.
    expect(warnings.length).toBe(1);
    clock.advance(60_000);
    store.check([take('late', 'l1')]);
    expect(warnings.length).toBe(2);
  });

  it('makes room from the counters that hold most: a pool of 1 is never emptied while one of 10 is there', () => {
    const store = new MemoryStore({ clock: new ManualClock(T0), maxSlotHolders: 20 });
    for (let i = 0; i < 10; i++) store.check([take('big', `b${i}`)]);
    for (let t = 0; t < 10; t++) store.check([take(`small-${t}`, 's')]);
    for (let t = 0; t < 5; t++) expect(store.check([take(`new-${t}`, 'x')]).admitted).toBe(true);
    // Five came out of 'big' (10 → 5); every small pool still holds its one.
    const again = Array.from({ length: 10 }, (_, t) => store.slots.holding(take(`small-${t}`, 's'), T0));
    expect(again).toEqual(Array.from({ length: 10 }, () => 1));
    expect(store.slots.evictions).toBe(5);
  });
});
