import type { CounterCheck } from '../check.js';

/** One counter of the memory store, shaped like Redis's: the window it counts (a bucket: when it was last
 * written, in ms from the store's base), its count (a bucket: its debt), and the count of the window before
 * (read by sliding windows and by RLQS). Window times are whole seconds from the store's base. */
export interface Series {
  /** The key, flat (memory-store.ts flat()); the expiry buckets hold this copy, not the request's. */
  k: string;
  w: number;
  c: number;
  p: number;
  /** When the series can be dropped, in seconds from the base. */
  e: number;
}

/** How the memory store reads and writes an algorithm's series; what check-and-incr.lua's include of the
 * same algorithm does in Redis. */
export interface SeriesOps {
  /** Writes the check's current value (a window's count, a bucket's debt) and the previous window's into
   * curr[i] and prev[i]. */
  read(s: Series | undefined, c: CounterCheck, nowMs: number, baseMs: number, i: number, curr: number[], prev: number[]): void;
  /** Adds `hits` (negative: given back; the value never goes below 0) to the series, whose value `check`
   * read as `curr`; returns when it can be dropped, in seconds from the base. */
  add(s: Series, c: CounterCheck, curr: number, nowMs: number, baseMs: number, hits: number): number;
}

/** What a kind is told of a limit as configured: its count, its window, its burst (0: none). CompiledLimit
 * (config/compiled.ts) is one. */
export interface LimitShape {
  requestsPerUnit: number;
  unit: string;
  burst: number;
}

/** A counter's span as the over-limit cache saw it (store/over-limit-cache.ts): when it began, and its values. */
export interface SeenSpan {
  start: number;
  curr: number;
  prev: number;
}

/** A kind of limit: what its value means to a decision and to an answer, and what it is to everything outside
 * its own files, which asks it instead of branching on its code or its name (test/unit/kind-branches.test.ts).
 * One module per kind (this folder), registered once (index.ts), whose place there is its code;
 * check-and-incr.lua includes one file per kind too. `curr` and `prev` are what the store read before the
 * request; `counted` what the request added. */
export interface LimitAlgorithm {
  /** Its name in a config's `algorithm` (in_flight: a descriptor's `in_flight`). */
  readonly kind: string;
  /** Slots held at once, each until its request ends or its lease does (memory-slots.ts, lua/slots.lua), not a
   * count per unit of time: taken and given back, never a charge, never cached, kept apart in both stores. */
  readonly slots: boolean;
  /** Refills continuously (a bucket): no window that turns; a blocked request's reset is when it would fit,
   * and a refund is given back whenever it comes. */
  readonly refills: boolean;
  /** The store's answer holds the previous window's count too (check-and-incr.lua's reply; RLQS reads it). */
  readonly readsPrevious: boolean;
  /** A bare count with an expiry: check-and-incr.lua's fast path for a request of such limits only. */
  readonly plainCount: boolean;
  /** A config may align its windows to calendar days, weeks, months and years. */
  readonly calendar: boolean;
  /** The config keys of a limit that only this kind has (a bucket: `burst`). */
  readonly configKeys: readonly string[];
  /** What one check weighs against a script call's keys (store/batch-queues.ts). */
  readonly weight: number;
  /** Its burst as compiled from a limit's config (0: it has none). */
  burstOf(requestsPerUnit: number, burst: number | undefined): number;
  /** Whether both stores keep a limit of this capacity and window exactly (Redis's doubles, JavaScript's). */
  exact(capacity: number, windowMs: number): boolean;
  /** What an empty counter admits at once: a window's limit, a bucket's burst. */
  capacity(l: LimitShape): number;
  /** How its count reads after the number: "per minute", "at once". */
  per(l: { unit: string }): string;
  /** What it is configured with beyond a count per unit, as shown (a bucket: its burst). */
  shown(l: LimitShape): { burst?: number };
  /** Milliseconds until what it counts starts over from its limit (RLQS spreads what is left over them). */
  turnMs(windowMs: number, nowMs: number): number;
  /** When the counter's current span began: a window's start (a bucket: now). */
  spanStartMs(c: CounterCheck, nowMs: number): number;
  /** What the over-limit cache answers for it: as last seen, or, unseen, as full as it can be (or empty). */
  fromCache(c: CounterCheck, seen: SeenSpan | undefined, full: boolean, nowMs: number): [curr: number, prev: number];
  /** Where the counter of one of a rule's limits is kept (counters/keys.ts). */
  storeKey(counterKey: string, windowName: string): string;
  /** What a decision weighs: a count, a sliding estimate, a bucket's debt (in ticks), the slots held. */
  used(c: CounterCheck, curr: number, prev: number, nowMs: number): number;
  /** The share of what it holds that `used` fills (1: full; more past it): what a charge_mode rule's spend list
   * orders its counters by (store/spend-top.ts); lua/spend-top.lua divides by the shape's cap the same way. */
  share(c: CounterCheck, used: number): number;
  /** Whether n more take it past what it holds. */
  exceeds(c: CounterCheck, used: number, n: number): boolean;
  /** What a refund can give back, in requests: what the current value holds (never below empty). */
  refundable(c: CounterCheck, curr: number): number;
  /** Whether a settlement now may give back an estimate reserved at `atMs` (only into what holds it). */
  holdsSince(c: CounterCheck, atMs: number, nowMs: number): boolean;
  /** After the request: what is left (a bucket: whole tokens), and how far past the limit it is. */
  remaining(c: CounterCheck, curr: number, prev: number, counted: number, nowMs: number): number;
  pastLimit(c: CounterCheck, curr: number, prev: number, counted: number, nowMs: number): number;
  /** When it is whole again (a window: its end; a bucket: full). */
  resetAtMs(c: CounterCheck, curr: number, counted: number, nowMs: number): number;
  /** Milliseconds until the request's hits would fit, when they do not now. */
  waitMs(c: CounterCheck, curr: number, prev: number, nowMs: number): number;
  /** Requests the value stands for, as inspection shows it (a bucket: tokens taken). */
  taken(c: CounterCheck, used: number): number;
  /** The memory store's series; undefined for slots, kept in their own table (memory-slots.ts). */
  readonly series: SeriesOps | undefined;
}
