import type { CheckResult, CounterCheck, CounterWindow } from '../limits/check.js';

export interface StoreHealth {
  degraded: boolean;
  reason: string | undefined;
}

/** An answer now, or later. A store that can answer at once (the memory store, a cached over-limit window)
 * returns it as it is: a decision then allocates no promise and waits for no microtask. */
export type Maybe<T> = T | Promise<T>;

/** What a store round trip is traced under: opaque to stores, made and read by tracing/ (a sampled
 * decision's span context). Absent for every decision that is not sampled. */
export type TraceLink = object;

/** Traces the round trips a store makes for several decisions at once (a Redis batch): one span, linked to
 * every sampled decision it carried. */
export interface BatchTracer {
  start(links: readonly TraceLink[], size: { requests: number; keys: number }): BatchSpan;
}

export interface BatchSpan {
  /** `failure`: what kind of failure ended the round trip (an error class name), never a value. */
  end(failure?: string): void;
}

/** Checks and counts all windows of a request atomically: a rejected request consumes nothing. */
export interface Store {
  readonly kind: string;
  /** `trace`: the sampled decision this call serves, passed on to the store's BatchTracer (tracing/). */
  check(checks: readonly CounterCheck[], trace?: TraceLink): Maybe<CheckResult>;
  /** Whether the store can answer now; the memory store always can. */
  health(): StoreHealth;
  /** Forgets these counters (current and previous window). Returns how many existed. */
  reset(windows: readonly CounterWindow[]): Promise<number>;
  close(): Promise<void>;
}
