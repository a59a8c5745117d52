import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { BatchQueues, BUSY_TURN, GATHER_BELOW, GATHER_MAX_MS, GATHER_TURNS } from '../../src/store/batch-queues.js';
import type { Pending } from '../../src/store/redis-batch.js';
import { counterCheck } from '../helpers/checks.js';

// The store's queues (src/store/batch-queues.ts) on fake timers and a fake clock: when a batch window sends, what
// it tells the store about the time it held a call, urgent requests, and a send that throws.

let clock = 0;
const sent: { to: string; n: number; heldMs: number }[] = [];
beforeEach(() => {
  vi.useFakeTimers();
  clock = 0;
  sent.length = 0;
});
afterEach(() => {
  vi.useRealTimers();
});

function pending(): Pending & { failed: () => unknown } {
  let failure: unknown;
  return {
    mode: 'count',
    checks: [counterCheck()],
    trace: undefined,
    resolve: () => undefined,
    reject: (e) => (failure = e),
    failed: () => failure,
  };
}

const queues = (windowMs: number, limit = 0): BatchQueues =>
  new BatchQueues(
    (batch, to, heldMs) => void sent.push({ to, n: batch.length, heldMs }),
    { windowMs, limit },
    () => clock,
  );

describe('BatchQueues', () => {
  it('with a window: every queue goes at its end, each saying how long its first request waited', () => {
    const q = queues(10);
    q.add('a', pending());
    clock = 4;
    q.add('b', pending());
    q.add('a', pending());
    vi.advanceTimersByTime(9);
    expect(sent).toEqual([]);
    clock = 10;
    vi.advanceTimersByTime(1);
    expect(sent).toEqual([
      { to: 'a', n: 2, heldMs: 10 },
      { to: 'b', n: 1, heldMs: 6 },
    ]);
  });

  it('without one: at the end of the turn, held for nothing', () => {
    const q = queues(0);
    q.add('a', pending());
    q.add('a', pending());
    vi.runAllTicks();
    vi.advanceTimersByTime(0);
    expect(sent).toEqual([{ to: 'a', n: 2, heldMs: 0 }]);
  });

  it('an urgent request ends the window: what waits goes with it at the end of the turn', () => {
    const q = queues(10);
    q.add('a', pending());
    clock = 3;
    q.add('a', pending(), true);
    vi.advanceTimersByTime(0);
    expect(sent).toEqual([{ to: 'a', n: 2, heldMs: 3 }]);
    vi.advanceTimersByTime(20);
    expect(sent).toHaveLength(1); // the window's timer is gone with it
  });

  it('the limit sends a full queue at once; the window still sends the rest', () => {
    const q = queues(10, 2);
    q.add('a', pending());
    q.add('b', pending());
    clock = 1;
    q.add('a', pending());
    expect(sent).toEqual([{ to: 'a', n: 2, heldMs: 1 }]);
    clock = 10;
    vi.advanceTimersByTime(10);
    expect(sent).toEqual([
      { to: 'a', n: 2, heldMs: 1 },
      { to: 'b', n: 1, heldMs: 10 },
    ]);
  });

  it('a send that throws fails every request of its call, none is left waiting', () => {
    const q = new BatchQueues(() => {
      throw new Error('encode failed');
    });
    const ps = [pending(), pending(), pending()];
    for (const p of ps) q.add('a', p);
    vi.advanceTimersByTime(0);
    for (const p of ps) expect(p.failed()).toBeInstanceOf(Error);
  });

  describe("a Cluster master's small share gathers for a few turns", () => {
    /** Every call stays out (unanswered) until `answer()`. */
    let answer: () => void = () => undefined;
    const masters = (): BatchQueues => {
      const out = new Promise<void>((resolve) => (answer = resolve));
      return new BatchQueues(
        (batch, to, heldMs) => {
          sent.push({ to, n: batch.length, heldMs });
          return out;
        },
        undefined,
        () => clock,
        (to) => to.startsWith('node:'),
      );
    };
    /** One event-loop turn: what was queued in it, then its end (the immediates it set). */
    const turn = (q: BatchQueues, ...to: string[]): void => {
      for (const t of to) q.add(t, pending());
      vi.advanceTimersToNextTimer();
    };

    /** Enough other requests (a hash tag's, which never gathers) to make a turn busy. */
    const others = Array(BUSY_TURN).fill('tag:x');

    it(`in busy turns, a share under ${GATHER_BELOW} waits up to ${GATHER_TURNS} turns, growing, its wait off its deadline`, () => {
      const q = masters();
      const step = GATHER_MAX_MS / (GATHER_TURNS + 1); // short turns: the turns, not the time, end it
      turn(q, 'node:a', ...others);
      expect(sent).toEqual([{ to: 'tag:x', n: BUSY_TURN, heldMs: 0 }]); // not a master's: it goes at the end of its turn
      for (let i = 1; i < GATHER_TURNS; i++) {
        clock += step;
        turn(q, 'node:a', ...others);
      }
      expect(sent.filter((x) => x.to === 'node:a')).toEqual([]);
      clock += step;
      turn(q, ...others);
      expect(sent.filter((x) => x.to === 'node:a')).toEqual([{ to: 'node:a', n: GATHER_TURNS, heldMs: GATHER_TURNS * step }]);
    });

    it(`however long its turns, a share gathers for at most ${GATHER_MAX_MS} ms`, () => {
      const q = masters();
      turn(q, 'node:a', ...others);
      clock += GATHER_MAX_MS;
      turn(q, ...others);
      expect(sent.filter((x) => x.to === 'node:a')).toEqual([{ to: 'node:a', n: 1, heldMs: GATHER_MAX_MS }]);
    });

    it('a give-back with its own time goes at once in a call of its own, and leaves a gathering share as it was', () => {
      const q = masters();
      turn(q, 'node:a', ...others);
      clock += 1;
      q.add('node:a', { ...pending(), atMs: 123 });
      expect(sent.filter((x) => x.to === 'node:a')).toEqual([{ to: 'node:a', n: 1, heldMs: 0 }]);
      clock += 0.5;
      for (let i = 0; i < GATHER_TURNS; i++) turn(q, ...others);
      expect(sent.filter((x) => x.to === 'node:a')).toEqual([
        { to: 'node:a', n: 1, heldMs: 0 },
        { to: 'node:a', n: 1, heldMs: 1.5 },
      ]);
    });

    it("the turn a request came in is not taken off its deadline, however long the turn: reading a burst is not Redis's delay", () => {
      const q = masters();
      q.add('tag:x', pending());
      clock = 5;
      vi.advanceTimersToNextTimer();
      expect(sent).toEqual([{ to: 'tag:x', n: 1, heldMs: 0 }]);
    });

    it(`with ${BUSY_TURN} requests waiting for Redis, a turn is busy however few come in it; their answers end that`, async () => {
      const q = masters();
      turn(q, ...others); // sent, and not answered
      turn(q, 'node:a');
      expect(sent.filter((x) => x.to === 'node:a')).toEqual([]);
      answer();
      await Promise.resolve();
      turn(q, 'node:b');
      expect(sent.filter((x) => x.to !== 'tag:x').map((x) => x.to)).toEqual(['node:a', 'node:b']);
    });

    it('in a quiet turn, a share goes at its end: nothing is coming to wait for', () => {
      const q = masters();
      turn(q, 'node:a', 'node:b');
      expect(sent).toEqual([
        { to: 'node:a', n: 1, heldMs: 0 },
        { to: 'node:b', n: 1, heldMs: 0 },
      ]);
    });

    it(`a share of ${GATHER_BELOW} goes at the end of its turn`, () => {
      const q = masters();
      turn(q, ...Array(GATHER_BELOW).fill('node:a'), 'node:b');
      expect(sent).toEqual([{ to: 'node:a', n: GATHER_BELOW, heldMs: 0 }]); // b's share of the busy turn waits
    });

    it('an urgent request (the second phase of a split, a reroute) does not wait', () => {
      const q = masters();
      q.add('node:a', pending());
      q.add('node:a', pending(), true);
      vi.advanceTimersToNextTimer();
      expect(sent).toEqual([{ to: 'node:a', n: 2, heldMs: 0 }]);
    });

    it('closing sends what gathers', () => {
      const q = masters();
      turn(q, 'node:a', ...others);
      q.flushNow();
      expect(sent.filter((x) => x.to === 'node:a')).toEqual([{ to: 'node:a', n: 1, heldMs: 0 }]);
    });
  });
});
