/** Requests and admitted requests over a log's time, for the report's charts, in a bounded number of
 * buckets: one second each at first; when a log runs longer than MAX_BUCKETS of them, neighbouring buckets
 * merge and each covers twice as long. A day-long log costs no more memory than an hour-long one. */

const MAX_BUCKETS = 2048;

export interface Series {
  /** Unix seconds where bucket 0 starts (the log's first second, the same for every rule of a replay). */
  originSecond: number;
  bucketSeconds: number;
  requests: number[];
  admitted: number[];
}

export class Timeline {
  private width = 1;
  private readonly requests: number[] = [];
  private readonly admitted: number[] = [];

  constructor(private readonly originSecond: number) {}

  /** Times only move forward (the simulator's clock never steps back), so buckets are appended in order. */
  add(second: number, admitted: boolean): void {
    let i = Math.floor((second - this.originSecond) / this.width);
    while (i >= MAX_BUCKETS) {
      this.coarsen();
      i = Math.floor((second - this.originSecond) / this.width);
    }
    while (this.requests.length <= i) {
      this.requests.push(0);
      this.admitted.push(0);
    }
    this.requests[i]!++;
    if (admitted) this.admitted[i]!++;
  }

  series(): Series {
    return { originSecond: this.originSecond, bucketSeconds: this.width, requests: [...this.requests], admitted: [...this.admitted] };
  }

  private coarsen(): void {
    const merge = (xs: number[]): void => {
      for (let j = 0; j < xs.length; j += 2) xs[j / 2] = xs[j]! + (xs[j + 1] ?? 0);
      xs.length = Math.ceil(xs.length / 2);
    };
    merge(this.requests);
    merge(this.admitted);
    this.width *= 2;
  }
}

/** A level over a log's time (slots held), in the same bounded buckets as Timeline: each bucket holds the
 * highest level reached in it, and a bucket no event touched holds the level carried into it. */
export interface LevelSeries {
  originSecond: number;
  bucketSeconds: number;
  /** The highest level in each bucket. */
  peak: number[];
}

export class LevelTimeline {
  private width = 1;
  private readonly peak: number[] = [];
  private level = 0;

  constructor(private readonly originSecond: number) {}

  /** The level from `second` on. Seconds only move forward (the replay's clock never steps back). */
  set(second: number, level: number): void {
    let i = Math.floor((second - this.originSecond) / this.width);
    while (i >= MAX_BUCKETS) {
      this.coarsen();
      i = Math.floor((second - this.originSecond) / this.width);
    }
    // The level held since the last event fills the buckets up to this one.
    while (this.peak.length <= i) this.peak.push(this.level);
    this.peak[i] = Math.max(this.peak[i]!, level);
    this.level = level;
  }

  series(): LevelSeries {
    return { originSecond: this.originSecond, bucketSeconds: this.width, peak: [...this.peak] };
  }

  private coarsen(): void {
    for (let j = 0; j < this.peak.length; j += 2) this.peak[j / 2] = Math.max(this.peak[j]!, this.peak[j + 1] ?? 0);
    this.peak.length = Math.ceil(this.peak.length / 2);
    this.width *= 2;
  }
}
