import { UserError } from '../errors.js';

/** What a replay has still to do at a later time (a stream's end, a slot's renewal), in time order: a binary
 * heap on (time, order of scheduling), so two events at the same millisecond run in the order they were made.
 * Bounded: a log whose streams overlap past the bound would hold the replay's memory without limit. */

/** Events pending at once, at most (a stream's end and a renewal are one each). */
export const MAX_PENDING = 1_000_000;

export class PendingBoundError extends UserError {
  override readonly name = 'PendingBoundError';
}

interface Item<T> {
  atMs: number;
  seq: number;
  value: T;
}

export class EventQueue<T> {
  private readonly heap: Item<T>[] = [];
  private seq = 0;

  constructor(private readonly max = MAX_PENDING) {}

  get size(): number {
    return this.heap.length;
  }

  /** The time of the soonest event, or undefined when none is pending. */
  peekTime(): number | undefined {
    return this.heap[0]?.atMs;
  }

  push(atMs: number, value: T): void {
    if (this.heap.length >= this.max) {
      throw new PendingBoundError(
        `more than ${this.max.toLocaleString('en-US')} stream ends and slot renewals pending at once (at ${new Date(atMs).toISOString()}): ` +
          "the log's streams overlap more than a replay holds; replay a shorter stretch of it",
      );
    }
    const h = this.heap;
    h.push({ atMs, seq: this.seq++, value });
    let i = h.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!before(h[i]!, h[parent]!)) break;
      [h[i], h[parent]] = [h[parent]!, h[i]!];
      i = parent;
    }
  }

  /** The soonest event and its time, removed. */
  pop(): { atMs: number; value: T } | undefined {
    const h = this.heap;
    const top = h[0];
    if (!top) return undefined;
    const last = h.pop()!;
    if (h.length > 0) {
      h[0] = last;
      let i = 0;
      for (;;) {
        const [l, r] = [2 * i + 1, 2 * i + 2];
        let m = i;
        if (l < h.length && before(h[l]!, h[m]!)) m = l;
        if (r < h.length && before(h[r]!, h[m]!)) m = r;
        if (m === i) break;
        [h[i], h[m]] = [h[m]!, h[i]!];
        i = m;
      }
    }
    return { atMs: top.atMs, value: top.value };
  }
}

function before<T>(a: Item<T>, b: Item<T>): boolean {
  return a.atMs < b.atMs || (a.atMs === b.atMs && a.seq < b.seq);
}
