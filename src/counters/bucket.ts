/** Token-bucket arithmetic (GCRA) shared by every store and the limiter. The Redis Lua script implements the
 * same formulas (src/store/lua/check-and-incr.lua); the store conformance suite keeps them in step.
 *
 * GCRA keeps one value per counter, the theoretical arrival time (TAT). With the emission interval
 * T = window / requests_per_unit and a capacity of `burst` requests, n requests fit at `now` when
 * max(TAT, now) + n·T − now ≤ burst·T (i.e. within the tolerance (burst − 1)·T of one interval), and then
 * TAT becomes max(TAT, now) + n·T. A rejected request changes nothing.
 *
 * T is rarely a whole number of ms (1000 / 3), so the stores keep TAT as a "debt" in ticks of
 * 1/requests_per_unit ms: debt = (TAT − now) × requests_per_unit, never negative. In ticks T = window ms, so
 * every quantity below is an integer and JavaScript and Lua compute exactly the same numbers (the config
 * keeps burst × window ms under 2^53). A stored bucket is { at: ms it was written, debt at that time }. */

/** The debt now: what was stored, paid back at requests_per_unit ticks per ms since it was stored. */
export function bucketDebt(storedDebt: number, storedAtMs: number, nowMs: number, limit: number): number {
  return Math.max(0, storedDebt - (nowMs - storedAtMs) * limit);
}

/** Whether `hits` tokens are there. hits 0 (check only) asks whether one more request would fit. */
export function bucketFits(debt: number, hits: number, windowMs: number, burst: number): boolean {
  return debt + Math.max(hits, 1) * windowMs <= burst * windowMs;
}

/** Whole tokens in the bucket at this debt. */
export function bucketRemaining(debt: number, windowMs: number, burst: number): number {
  return Math.max(0, burst - Math.ceil(debt / windowMs));
}

/** Milliseconds until the bucket is full again (debt paid back). A limit of 0 never refills: a window. */
export function bucketFullInMs(debt: number, windowMs: number, limit: number): number {
  return limit === 0 ? windowMs : Math.ceil(debt / limit);
}

/** Milliseconds until `hits` tokens are there, given the debt before the request; at least 1. A request
 * larger than the burst never fits: it is told when the bucket is full, the most it will ever hold. */
export function bucketRetryMs(debt: number, hits: number, windowMs: number, burst: number, limit: number): number {
  const n = Math.max(hits, 1);
  if (limit === 0) return windowMs;
  if (n > burst) return Math.max(1, Math.ceil(debt / limit));
  return Math.max(1, Math.ceil((debt + (n - burst) * windowMs) / limit));
}
