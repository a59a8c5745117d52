/** The share of the process RLQS work may take (RLQS_CPU_SHARE), so RLS decisions keep their latency whatever
 * RLQS clients send. RLQS work (decoding a report, reading its buckets, assigning, writing the answer) is charged
 * the process CPU time it took (process.cpuUsage: garbage collection and the continuations after an await
 * included, which a clock around the synchronous part alone missed by half); a report waits for its turn while
 * what RLQS spent is ahead of its share of the time gone by. Work that awaits Redis is also charged what RLS did
 * meanwhile: RLQS gives way the more the process is busy, never the other way round.
 * Reports are not on any request's path (Envoy decides locally and keeps its assignments meanwhile), so waiting
 * costs their clients nothing but a later answer; a decision waits for nobody. Turns are first come, first
 * served, so one busy stream cannot starve the others. */

function processCpuMs(): number {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1000;
}

/** Time RLQS may spend at once after being idle: two slices' work, about (slices.ts). */
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
    /** The process's CPU time so far, in ms. */
    private readonly spentMs: () => number = processCpuMs,
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

  /** The process's CPU time so far, in ms. */
  spent(): number {
    return this.spentMs();
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

/** One piece of RLQS work (an answer, a re-assignment), charged at each of its turns with the process CPU time
 * since its last: what ran between two turns was this work (and what RLS did while it awaited Redis). */
export class Meter {
  private mark: number;

  constructor(private readonly share: CpuShare) {
    this.mark = share.spent();
  }

  /** Charges what was spent since the last turn, then waits for the next. */
  async turn(): Promise<void> {
    this.settle();
    await this.share.turn();
    this.mark = this.share.spent();
  }

  /** Charges what was spent since the last turn: at the end of the work. */
  settle(): void {
    const now = this.share.spent();
    this.share.charge(now - this.mark);
    this.mark = now;
  }
}

/** Answers being worked on at once in the whole process. Each holds its report's decoded usages (up to twice
 * the bucket bound, ~150 bytes each) until it ends; the others wait with their reports still as bytes, so what
 * RLQS holds decoded stays a few answers' worth however many streams report at once. More than one, so that an
 * answer waiting on Redis does not hold up the rest; two, not four: under 64 streams × 10,000 buckets four made
 * RLS's p99 41-64 ms and two 34-37 ms (the garbage of fewer answers at once). */
export const ANSWERS_AT_ONCE = 2;

export class AnswerSlots {
  private busy = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(private readonly most = ANSWERS_AT_ONCE) {}

  /** Resolves with the release of a slot once one is free. */
  async take(): Promise<() => void> {
    if (this.busy >= this.most) await new Promise<void>((resolve) => this.waiting.push(resolve));
    else this.busy++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.waiting.shift();
      if (next)
        next(); // the slot passes on: busy stays
      else this.busy--;
    };
  }
}
