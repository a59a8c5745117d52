/** The share of the process RLQS work may take (RLQS_CPU_SHARE), so RLS decisions keep their latency whatever
 * RLQS clients send. RLQS work (decoding a report, reading its buckets, writing the answer) is timed as it runs
 * and charged here; a report waits for its turn while what RLQS spent is ahead of its share of the time gone by.
 * Reports are not on any request's path (Envoy decides locally and keeps its assignments meanwhile), so waiting
 * costs their clients nothing but a later answer; a decision waits for nobody. Turns are first come, first
 * served, so one busy stream cannot starve the others. */

/** Time RLQS may spend at once after being idle: one 10,000-bucket report's work, about. */
const BURST_MS = 40;

export class CpuShare {
  /** Time RLQS may still spend now (negative: in debt), as of `atMs`. */
  private credit = BURST_MS;
  private atMs: number;
  private readonly waiting: (() => void)[] = [];
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly share: number,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.atMs = now();
  }

  /** Resolves when RLQS may run its next piece of work. */
  turn(): Promise<void> {
    if (this.waiting.length === 0 && this.refill() > 0) return Promise.resolve();
    return new Promise((resolve) => {
      this.waiting.push(resolve);
      this.schedule();
    });
  }

  /** Runs `work` now, charging the time it took. */
  timed<T>(work: () => T): T {
    const start = this.now();
    try {
      return work();
    } finally {
      this.charge(this.now() - start);
    }
  }

  charge(ms: number): void {
    this.refill();
    this.credit -= ms;
  }

  /** Waiters still queued: reports held back by the share. */
  get held(): number {
    return this.waiting.length;
  }

  private refill(): number {
    const now = this.now();
    this.credit = Math.min(BURST_MS, this.credit + (now - this.atMs) * this.share);
    this.atMs = now;
    return this.credit;
  }

  /** Lets the waiters go, one per turn while there is credit, and waits for the credit the next one needs. */
  private schedule(): void {
    if (this.timer) return;
    const credit = this.refill();
    if (credit > 0) {
      const next = this.waiting.shift();
      next?.();
      if (this.waiting.length > 0) this.timer = setTimeout(() => this.wake(), 0).unref();
      return;
    }
    this.timer = setTimeout(() => this.wake(), Math.ceil(-credit / this.share) + 1).unref();
  }

  private wake(): void {
    this.timer = undefined;
    if (this.waiting.length > 0) this.schedule();
  }
}
