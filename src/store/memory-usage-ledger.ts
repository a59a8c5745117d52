import type { UsageEvent, UsageOutcome, UsageSubject } from './usage-ledger.js';

/** Events one read returns, at most. */
export const MAX_USAGE_READ = 10_000;

/** The memory store's usage ledger (usage-ledger.ts): a ring of the last `max` events, numbered from 1 in the
 * order written. A reader asks for those after the last it wrote (`tollgate usage export --url`, through the
 * admin API), so nothing is acknowledged here: the exporter's own files say what it has. An event the ring
 * overwrites before any read reached it is counted as dropped. */
export class MemoryUsageLedger {
  private readonly ring: (UsageEvent | undefined)[];
  /** Its name: a restarted process's ring numbers from 1 again, and is another stream to an exporter. */
  readonly stream = `mem-${Date.now()}`;
  private written = 0;
  /** The highest number any read has returned. */
  private readThrough = 0;
  dropped = 0;

  constructor(private readonly max: number) {
    this.ring = [];
  }

  append(s: UsageSubject, outcome: UsageOutcome, tokens: number, estimate: number, rid: string, t: number): void {
    const n = ++this.written;
    const slot = (n - 1) % this.max;
    const gone = this.ring[slot];
    if (gone && Number(gone.id) > this.readThrough) this.dropped++;
    this.ring[slot] = { stream: this.stream, id: String(n), t, ...s, outcome, tokens, estimate, rid };
  }

  /** Events written that no read has returned yet (those the ring still holds). */
  get unread(): number {
    return Math.min(this.max, this.written - this.readThrough);
  }

  /** Events numbered after `after`, oldest first, at most `count`; `first`: the oldest the ring still holds. */
  read(after: number, count: number): { stream: string; events: UsageEvent[]; first: number; last: number } {
    const first = Math.max(1, this.written - this.max + 1);
    const events: UsageEvent[] = [];
    for (let n = Math.max(after + 1, first); n <= this.written && events.length < Math.min(count, MAX_USAGE_READ); n++) {
      events.push(this.ring[(n - 1) % this.max]!);
    }
    if (events.length > 0) this.readThrough = Math.max(this.readThrough, Number(events.at(-1)!.id));
    return { stream: this.stream, events, first, last: this.written };
  }
}
