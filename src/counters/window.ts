/** Window arithmetic shared by every store and the limiter. The Redis Lua script implements the same
 * formulas (see src/store/lua/check-and-incr.lua); the store conformance suite keeps them in step. */

/** Windows are aligned to the Unix epoch, so every replica agrees where one starts. */
export function windowStartMs(nowMs: number, windowMs: number): number {
  return nowMs - (nowMs % windowMs);
}

/** The sliding-window estimate: the previous window's count weighted by how much of it still overlaps the
 * last `windowMs`, plus the current window's count. */
export function slidingUsed(prev: number, curr: number, nowMs: number, windowMs: number): number {
  return (prev * (windowMs - (nowMs % windowMs))) / windowMs + curr;
}

/** Whether `hits` more fit. hits 0 (check only) asks whether one more request would fit. */
export function hasRoom(used: number, hits: number, limit: number): boolean {
  return used + Math.max(hits, 1) <= limit;
}

export interface WindowShape {
  windowMs: number;
  limit: number;
  hits: number;
  sliding: boolean;
}

/** Milliseconds until `hits` would fit, given the counts before the request. Never 0 for a full window;
 * a request larger than the limit can never fit, so it is told to wait a whole window. */
export function retryAfterMs(w: WindowShape, prev: number, curr: number, nowMs: number): number {
  const elapsed = nowMs % w.windowMs;
  const untilNext = w.windowMs - elapsed;
  const room = w.limit - Math.max(w.hits, 1);
  if (room < 0) return w.windowMs;
  if (!w.sliding) return untilNext;
  // weight * (W - e) / W <= r  <=>  e >= W - r * W / weight; e is whole ms. Written without 1 - x so
  // that exact cases (r * W divisible by weight) stay exact in floating point.
  const elapsedNeeded = (r: number, weight: number): number => w.windowMs - Math.floor((r * w.windowMs) / weight);
  if (curr > room) {
    // Must wait for the next window, where this window's count becomes the weighted previous one.
    return untilNext + elapsedNeeded(room, curr);
  }
  if (prev <= 0) return 1;
  return Math.max(1, elapsedNeeded(room - curr, prev) - elapsed);
}
