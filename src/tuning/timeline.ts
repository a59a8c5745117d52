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
