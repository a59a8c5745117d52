/** Windows that are not plain epoch-aligned lengths: UTC calendar months and years, and weeks from Monday.
 * Shared by every store and the limiter; check-and-incr.lua implements the same arithmetic (its `bounds`),
 * and the store conformance suite holds both to the same month boundaries.
 *
 * A window's `calendar` code says how it is aligned:
 *   0            epoch-aligned, `windowMs` long (every window without `calendar: true`, and calendar days,
 *                which the epoch already aligns to UTC midnight)
 *   -1           weeks from Monday 00:00 UTC: epoch-aligned after a shift of four days (1970-01-01 was a
 *                Thursday, 1970-01-05 the first Monday)
 *   n > 0        n calendar months from the first of a month 00:00 UTC (a year is 12, a quarter 3), counted
 *                from January 1970, so every replica and both stores agree where a window starts
 * Its index (the counter's name in Redis) is the number of whole windows since the epoch's first. */

export const EPOCH_ALIGNED = 0;
export const FROM_MONDAY = -1;
const MONDAY_MS = 4 * 86_400_000;

export interface WindowBounds {
  index: number;
  startMs: number;
  endMs: number;
}

/** Months since January 1970 of a time. */
function monthOf(nowMs: number): number {
  const d = new Date(nowMs);
  return (d.getUTCFullYear() - 1970) * 12 + d.getUTCMonth();
}

/** The first instant of month `m` since January 1970. */
function monthStartMs(m: number): number {
  return Date.UTC(1970 + Math.floor(m / 12), m % 12, 1);
}

/** Where the window holding `nowMs` starts and ends, and its index. */
export function windowBounds(nowMs: number, windowMs: number, calendar: number): WindowBounds {
  if (calendar > 0) {
    const index = Math.floor(monthOf(nowMs) / calendar);
    return { index, startMs: monthStartMs(index * calendar), endMs: monthStartMs((index + 1) * calendar) };
  }
  const shift = calendar === FROM_MONDAY ? MONDAY_MS : 0;
  const index = Math.floor((nowMs - shift) / windowMs);
  const startMs = index * windowMs + shift;
  return { index, startMs, endMs: startMs + windowMs };
}

/** When the window holding `nowMs` ends. */
export function windowEndMs(nowMs: number, windowMs: number, calendar: number): number {
  return calendar === EPOCH_ALIGNED ? nowMs - (nowMs % windowMs) + windowMs : windowBounds(nowMs, windowMs, calendar).endMs;
}
