/** The delay before reconnecting to the xDS management server, as envoyproxy/ratelimit computes it with
 * github.com/jpillora/backoff (src/provider/xds_grpc_sotw_provider.go): attempt n waits
 * initial × factor^n, drawn uniformly between initial and that when jittered, never less than initial nor
 * more than max. A factor of at most 1 therefore waits `initial` every time (envoyproxy/ratelimit's default
 * factor, 0.5, does; Tollgate's default is 2). */
export interface BackoffOptions {
  initialMs: number;
  maxMs: number;
  factor: number;
  jitter: boolean;
}

export class Backoff {
  private attempt = 0;

  constructor(
    private readonly o: BackoffOptions,
    private readonly random: () => number = Math.random,
  ) {}

  /** The next delay; each call is one more attempt. */
  next(): number {
    return this.forAttempt(this.attempt++);
  }

  /** After a stream that worked: the next failure starts again from `initial`. */
  reset(): void {
    this.attempt = 0;
  }

  private forAttempt(n: number): number {
    const { initialMs: min, maxMs: max } = this.o;
    if (min >= max) return max;
    let d = min * this.o.factor ** n;
    if (this.o.jitter) d = this.random() * (d - min) + min;
    if (!Number.isFinite(d) || d > max) return max;
    return d < min ? min : Math.round(d);
  }
}
