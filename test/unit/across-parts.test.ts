import { describe, expect, it } from 'vitest';
import type { CheckResult, CounterCheck } from '../../src/limits/check.js';
import { acrossParts, type Enqueue } from '../../src/store/across-parts.js';
import { counterCheck } from '../helpers/checks.js';
import { BUCKET, FIXED, SLIDING, SLOTS } from '../helpers/kinds.js';

// A request over several masters (src/store/across-parts.ts) against a fake store whose every part answers at
// once: what is sent to each part, and when a part refuses, what the others give back and at what time. The
// Cluster itself is in test/integration/redis-cluster-batches.test.ts.

interface Sent {
  mode: string;
  to: string;
  hits: number[];
  atMs: number | undefined;
}

/** Each part's answer by destination: admitted or not, at the store time `nowMs`. */
function fake(answers: Record<string, { admitted: boolean; nowMs: number }>): { enqueue: Enqueue; sent: Sent[] } {
  const sent: Sent[] = [];
  const enqueue: Enqueue = (mode, checks, to, _trace, _urgent, atMs) => {
    // A refund shown with its sign, as the script receives it, so a give-back reads as one.
    sent.push({ mode, to, hits: checks.map((c) => (c.op === 'refund' ? -c.hits : c.hits)), atMs });
    const { admitted, nowMs } = answers[to]!;
    const n = checks.length;
    const r: CheckResult = { nowMs, admitted, curr: new Array(n).fill(0), prev: new Array(n).fill(0), over: checks.map(() => !admitted) };
    return Promise.resolve(r);
  };
  return { enqueue, sent };
}

const check = (key: string, over: Partial<CounterCheck> = {}): CounterCheck => counterCheck({ key, windowMs: 60_000, limit: 10, ...over });

describe('a plain request over several masters', () => {
  it('admitted everywhere: one count a part, nothing given back', async () => {
    const { enqueue, sent } = fake({ a: { admitted: true, nowMs: 1000 }, b: { admitted: true, nowMs: 1000 } });
    const r = await acrossParts(enqueue, 'count', [check('x', { group: 0 }), check('y', { group: 1 })], [[0], [1]], ['a', 'b']);
    expect(r.admitted).toBe(true);
    expect(sent.map((s) => s.to)).toEqual(['a', 'b']);
  });

  it("refused by one: the other gives back each window it counted, decided at its count's time; a bucket at Redis's", async () => {
    const { enqueue, sent } = fake({ a: { admitted: true, nowMs: 59_999 }, b: { admitted: false, nowMs: 60_001 } });
    const checks = [
      check('fixed', { group: 0, hits: 2 }),
      check('sliding', { group: 0, kind: SLIDING, hits: 2 }),
      check('bucket', { group: 1, kind: BUCKET, burst: 10, hits: 2 }),
      check('refuser', { group: 2 }),
    ];
    const r = await acrossParts(enqueue, 'count', checks, [[0, 1, 2], [3]], ['a', 'b']);
    expect(r.admitted).toBe(false);
    const back = sent.slice(2);
    // In the window counted (59,999 is the last ms of the first minute), not the one it is sent in.
    expect(back).toContainEqual({ mode: 'count', to: 'a', hits: [-2, -2], atMs: 59_999 });
    expect(back).toContainEqual({ mode: 'count', to: 'a', hits: [-2], atMs: undefined });
    expect(back).toHaveLength(2);
    expect(r.givenBack?.sort()).toEqual(['bucket', 'fixed', 'sliding']);
  });

  it('a part that fails: the request fails, after the others gave back', async () => {
    const { enqueue: base, sent } = fake({ a: { admitted: true, nowMs: 5 } });
    const enqueue: Enqueue = (mode, checks, to, trace, urgent, atMs) =>
      to === 'b' ? Promise.reject(new Error('frozen')) : base(mode, checks, to, trace, urgent, atMs);
    await expect(acrossParts(enqueue, 'count', [check('x', { group: 0 }), check('y', { group: 1 })], [[0], [1]], ['a', 'b'])).rejects.toThrow('frozen');
    expect(sent.slice(1)).toEqual([{ mode: 'count', to: 'a', hits: [-1], atMs: 5 }]);
  });

  it('a request with a charge is peeked first, then counted', async () => {
    const { enqueue, sent } = fake({ a: { admitted: true, nowMs: 1 }, b: { admitted: true, nowMs: 1 } });
    await acrossParts(enqueue, 'count', [check('x', { group: 0, charge: true }), check('y', { group: 1, kind: FIXED })], [[0], [1]], ['a', 'b']);
    expect(sent.map((s) => s.mode)).toEqual(['peek', 'peek', 'count', 'count']);
  });

  it('a give-back sent again over several slots goes to every part at once, each at its own time, without a peek', async () => {
    const { enqueue, sent } = fake({ a: { admitted: true, nowMs: 7 }, b: { admitted: true, nowMs: 7 } });
    const back = [check('x', { group: 0, op: 'refund', hits: 1, charge: true }), check('y', { group: 1, op: 'refund', hits: 1, charge: true })];
    await acrossParts(enqueue, 'count', back, [[0], [1]], ['a', 'b'], undefined, true, 59_999);
    expect(sent).toEqual([
      { mode: 'count', to: 'a', hits: [-1], atMs: 59_999 },
      { mode: 'count', to: 'b', hits: [-1], atMs: 59_999 },
    ]);
  });
});

describe('a request with a slot over several masters, refused at its count after its peek fitted', () => {
  /** Answers the peek with `peek`, each part's count with `count`; a slot part says what it took (counted). */
  function racing(count: Record<string, boolean>): { enqueue: Enqueue; sent: { mode: string; to: string; ops: string[]; hits: number[]; atMs?: number }[] } {
    const sent: { mode: string; to: string; ops: string[]; hits: number[]; atMs?: number }[] = [];
    const enqueue: Enqueue = (mode, checks, to, _trace, _urgent, atMs) => {
      sent.push({ mode, to, ops: checks.map((c) => c.op), hits: checks.map((c) => c.hits), ...(atMs !== undefined && { atMs }) });
      const admitted = mode === 'peek' || count[to]!;
      const n = checks.length;
      const r: CheckResult = { nowMs: 30_000, admitted, curr: new Array(n).fill(0), prev: new Array(n).fill(0), over: checks.map(() => !admitted) };
      if (checks.some((c) => c.charge)) r.counted = checks.map((c) => (admitted && mode === 'count' ? c.hits : 0));
      return Promise.resolve(r);
    };
    return { enqueue, sent };
  }
  const slot = counterCheck({ key: 'slots', kind: SLOTS, op: 'take', charge: true, limit: 5, windowMs: 60_000, group: 0, slots: { id: 'r1' } });
  const shared = check('shared', { group: 1 });

  it('the slot is refused: the shared window gives its hit back, in the window counted', async () => {
    const { enqueue, sent } = racing({ a: false, b: true });
    const r = await acrossParts(enqueue, 'count', [slot, shared], [[0], [1]], ['a', 'b']);
    expect(r.admitted).toBe(false);
    expect(sent.slice(4)).toEqual([{ mode: 'count', to: 'b', ops: ['refund'], hits: [1], atMs: 30_000 }]);
    expect(r.givenBack).toEqual(['shared']);
  });

  it('the shared window is refused: the slot taken is given back by its id', async () => {
    const { enqueue, sent } = racing({ a: true, b: false });
    const r = await acrossParts(enqueue, 'count', [slot, shared], [[0], [1]], ['a', 'b']);
    expect(r.admitted).toBe(false);
    expect(sent.slice(4)).toEqual([{ mode: 'count', to: 'a', ops: ['giveBack'], hits: [1] }]);
    // Given back, so not taken: the answer counts nothing for it (the limiter reports no slot taken).
    expect(r.counted).toEqual([0, 0]);
  });

  it('a give-back that fails leaves its count: the slot is reported taken (held until its lease)', async () => {
    const { enqueue: base } = racing({ a: true, b: false });
    const enqueue: Enqueue = (mode, checks, to, trace, urgent, atMs) =>
      checks.some((c) => c.op === 'giveBack') ? Promise.reject(new Error('frozen')) : base(mode, checks, to, trace, urgent, atMs);
    const r = await acrossParts(enqueue, 'count', [slot, shared], [[0], [1]], ['a', 'b']);
    expect(r.admitted).toBe(false);
    expect(r.counted).toEqual([1, 0]);
    expect(r.givenBack).toEqual([]);
  });

  it('a quota-mode window a part counted (as shadow) is given back too; a charge stays', async () => {
    const { enqueue, sent } = racing({ a: true, b: false });
    const quota = check('quota', { group: 1, quota: true });
    const charge = check('charge', { group: 2, charge: true });
    const r = await acrossParts(enqueue, 'count', [slot, quota, charge, shared], [[0, 1, 2], [3]], ['a', 'b']);
    expect(r.admitted).toBe(false);
    const back = sent.slice(4);
    expect(back).toContainEqual({ mode: 'count', to: 'a', ops: ['refund'], hits: [1], atMs: 30_000 });
    expect(back).toContainEqual({ mode: 'count', to: 'a', ops: ['giveBack'], hits: [1] });
    expect(back).toHaveLength(2);
    expect(r.givenBack?.sort()).toEqual(['quota', 'slots']);
    expect(r.counted).toEqual([0, 0, 1, 0]);
  });

  it('admitted everywhere: nothing given back', async () => {
    const { enqueue, sent } = racing({ a: true, b: true });
    expect((await acrossParts(enqueue, 'count', [slot, shared], [[0], [1]], ['a', 'b'])).admitted).toBe(true);
    expect(sent).toHaveLength(4);
  });
});
