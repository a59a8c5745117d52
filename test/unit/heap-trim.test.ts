import { describe, expect, it } from 'vitest';
import { GROWTH_BYTES, IDLE_UTILIZATION, startHeapTrim, TICKS_BETWEEN, TrimPolicy } from '../../src/heap-trim.js';

const MB = 2 ** 20;
const base = 100 * MB;

/** Looks at `policy` with each [rss, utilization] in turn; the looks at which it trims. */
function trimsAt(policy: TrimPolicy, looks: [number, number][]): number[] {
  return looks.flatMap(([rss, u], i) => (policy.look(rss, u) ? [i] : []));
}

describe('when a quiet process with a grown heap is trimmed', () => {
  it('trims once quiet after a burst grew RSS past the floor, and not while busy', () => {
    const looks: [number, number][] = [
      [base, 0.001], // the floor
      [base + GROWTH_BYTES + MB, 0.9], // the burst: busy
      [base + GROWTH_BYTES + MB, 0.5],
      [base + GROWTH_BYTES + MB, IDLE_UTILIZATION], // quiet: trim
    ];
    expect(trimsAt(new TrimPolicy(), looks)).toEqual([3]);
  });

  it('waits for a look in which no call came at all', () => {
    const grown = base + GROWTH_BYTES + MB;
    const policy = new TrimPolicy();
    policy.look(base, 0);
    const called = [true, true, true, true, true, false].map((c) => policy.look(grown, 0, c));
    expect(called).toEqual([false, false, false, false, false, true]);
  });

  it('leaves a heap that grew less than the bound alone', () => {
    const looks: [number, number][] = Array.from({ length: 10 }, (_, i) => [base + (i === 0 ? 0 : GROWTH_BYTES - MB), 0]);
    expect(trimsAt(new TrimPolicy(), looks)).toEqual([]);
  });

  it('takes RSS after a trim as the new floor: live state that stays is trimmed once, not at every look', () => {
    const held = base + 3 * GROWTH_BYTES;
    const looks: [number, number][] = [[base, 0], ...Array.from({ length: 20 }, (): [number, number] => [held, 0])];
    expect(trimsAt(new TrimPolicy(), looks)).toEqual([1]);
  });

  it('trims at most once every TICKS_BETWEEN looks, whatever bursts and pauses a client alternates', () => {
    const policy = new TrimPolicy();
    policy.look(base, 0);
    const at: number[] = [];
    let rss = base;
    for (let i = 1; i <= 40; i++) {
      rss += GROWTH_BYTES; // every look grown again, and quiet
      if (policy.look(rss, 0)) at.push(i);
    }
    expect(at.length).toBeGreaterThan(1);
    for (let k = 1; k < at.length; k++) expect(at[k]! - at[k - 1]!).toBeGreaterThanOrEqual(TICKS_BETWEEN);
  });

  it('does nothing without V8 gc() (an operator turned --expose-gc off) or with an interval of 0', () => {
    const deps = { logger: { info: () => undefined }, calls: () => 0 };
    const a = startHeapTrim(10, deps, undefined);
    const b = startHeapTrim(0, deps, () => undefined);
    expect([a.trims, b.trims]).toEqual([0, 0]);
    a.stop();
    b.stop();
  });
});
