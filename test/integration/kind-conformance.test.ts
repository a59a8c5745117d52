import { describe, expect, it } from 'vitest';
import { compileSources } from '../../src/config/load.js';
import type { LimitKind } from '../../src/config/spec.js';
import { ManualClock } from '../../src/counters/clock.js';
import { type DescriptorInput, Limiter } from '../../src/limiter/limiter.js';
import { ALGORITHMS } from '../../src/limits/kinds/index.js';
import { everyStore } from '../helpers/stores.js';

// The contract every kind of limit keeps, on every store, through the real planner and limiter: from empty,
// with the clock still, a limit of 5 admits what an empty counter holds (its capacity: 5, unless CAPACITY_OF
// says otherwise) of 7 at once, refuses the rest without counting them, a refund of n makes room for exactly n
// (up to the capacity), and a refund never takes a counter below empty. A kind registered in
// src/limits/kinds/index.ts without a rule here fails the first test.

const RULE_OF: Record<LimitKind, string> = {
  fixed_window: 'rate_limit: {unit: hour, requests_per_unit: 5}',
  sliding_window: 'algorithm: sliding_window\n    rate_limit: {unit: hour, requests_per_unit: 5}',
  token_bucket: 'algorithm: token_bucket\n    rate_limit: {unit: hour, requests_per_unit: 5}',
  in_flight: 'in_flight: {limit: 5, lease: 1h}',
};
/** What an empty counter of a kind's rule above admits at once, when not 5 (a bucket whose burst is not its rate). */
const CAPACITY_OF: Partial<Record<LimitKind, number>> = {};
const T0 = 1_800_000_000_000 + 1234;

describe('every registered kind has a conformance rule', () => {
  it('names exactly the kinds of src/limits/kinds/index.ts', () => {
    expect(Object.keys(RULE_OF).sort()).toEqual(ALGORITHMS.map((a) => a.kind).sort());
  });
});

describe('the contract of every kind, on every store', () => {
  const { stores } = everyStore({ cluster: true });
  const cases = stores.flatMap(([store, make]) => ALGORITHMS.map((a) => [store, a.kind, make] as const));

  it.each(cases)('%s, %s', async (_store, kind, make) => {
    const config = compileSources([{ file: 'k.yaml', text: `domain: k\ndescriptors:\n  - key: tenant\n    ${RULE_OF[kind as LimitKind]}\n` }]);
    const limit = config.domains.get('k')!.rules[0]!.limits[0]!;
    expect(limit.algorithm).toBe(kind);
    const capacity = CAPACITY_OF[kind as LimitKind] ?? 5;
    expect(ALGORITHMS[limit.kind]!.capacity(limit)).toBe(capacity);
    const clock = new ManualClock(T0);
    const limiter = new Limiter({ config: () => config, store: await make(clock), clock });
    const ask = async (d: Omit<DescriptorInput, 'entries'>) =>
      limiter.decide({ domain: 'k', hits: 1, descriptors: [{ entries: [{ key: 'tenant', value: 'acme' }], ...d }] });
    const admitted = async (n: number): Promise<number> => (await Promise.all(Array.from({ length: n }, () => ask({})))).filter((d) => !d.overLimit).length;

    expect(await admitted(7)).toBe(capacity);
    const full = await ask({ hits: 0 });
    expect([full.overLimit, full.descriptors[0]!.windows[0]!.remaining]).toEqual([true, 0]);
    // A refund gives back at most what is held.
    const back = Math.min(2, capacity);
    const refund = await ask({ hits: 2, refund: true });
    expect([refund.overLimit, refund.descriptors[0]!.windows[0]!.remaining]).toEqual([false, back]);
    expect(await admitted(back + 2)).toBe(back);
    // More back than is held: empty, never below it.
    expect((await ask({ hits: 50, refund: true })).descriptors[0]!.windows[0]!.remaining).toBe(capacity);
    expect(await admitted(7)).toBe(capacity);
  });
});
