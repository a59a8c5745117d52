import type { KindCode } from '../../config/kinds.js';
import type { LimitKind } from '../../config/spec.js';
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

/** A limit algorithm: what its value means to a decision and to an answer. One module per algorithm (this
 * folder), picked by the check's kind (index.ts); check-and-incr.lua includes one file per algorithm too.
 * `curr` and `prev` are what the store read before the request; `counted` what the request added. */
export interface LimitAlgorithm {
  readonly kind: LimitKind;
  readonly code: KindCode;
  /** Where the counter of one of a rule's limits is kept (counters/keys.ts). */
  storeKey(counterKey: string, windowName: string): string;
  /** What a decision weighs: a count, a sliding estimate, a bucket's debt (in ticks), the slots held. */
  used(c: CounterCheck, curr: number, prev: number, nowMs: number): number;
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
