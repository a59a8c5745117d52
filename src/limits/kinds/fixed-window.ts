import { windowBounds, windowEndMs } from '../../counters/calendar.js';
import { windowKey } from '../../counters/keys.js';
import { retryAfterMs, windowStartMs } from '../../counters/window.js';
import type { CounterCheck } from '../check.js';
import type { LimitAlgorithm, LimitShape, SeenSpan, Series } from './algorithm.js';

/** Fixed windows, epoch-aligned or on calendar boundaries (counters/calendar.ts): a count per window, over
 * when count + hits > limit. Redis: lua/fixed.lua. */

/** Where the check's window starts, in ms. */
function windowStart(c: CounterCheck, nowMs: number): number {
  return c.calendar === 0 ? windowStartMs(nowMs, c.windowMs) : windowBounds(nowMs, c.windowMs, c.calendar).startMs;
}

/** Where the check's window starts, in whole seconds from the store's base. */
export function windowSecond(c: CounterCheck, nowMs: number, baseMs: number): number {
  return (windowStart(c, nowMs) - baseMs) / 1000;
}

/** Counts `hits` in the current window (a count stays at 0 or more), keeping the previous window's count, as
 * Redis keeps a window's counter past its end (RLQS reads what RLS admitted there). A window's count grows
 * from what it holds now, not from what the request read: a request holding one window twice counts it twice,
 * as Redis's INCRBY per window does. Returns the second the series may be dropped: `keep` seconds after the
 * window starts. */
export function addToWindow(s: Series, c: CounterCheck, nowMs: number, baseMs: number, hits: number, keep: number): number {
  const start = windowSecond(c, nowMs, baseMs);
  const windowS = c.windowMs / 1000;
  const live = s.w === start ? s.c : 0;
  s.p = c.calendar !== 0 ? 0 : s.w === start ? s.p : s.w === start - windowS ? s.c : 0;
  s.w = start;
  s.c = Math.max(0, live + hits);
  return start + keep;
}

/** What a window of either kind is to the rest (sliding-window.ts keeps these). */
export const windowTraits = {
  slots: false,
  refills: false,
  configKeys: [],
  weight: 1,
  burstOf: () => 0,
  exact: () => true,
  capacity: (l: LimitShape) => l.requestsPerUnit,
  share: (c: CounterCheck, used: number) => used / c.limit,
  per: (l: { unit: string }) => `per ${l.unit}`,
  shown: () => ({}),
  spanStartMs: windowStart,
  // Seen in the window now: as seen; unseen and full: at its limit.
  fromCache: (c: CounterCheck, seen: SeenSpan | undefined, full: boolean, nowMs: number): [number, number] => {
    const current = seen !== undefined && seen.start === windowStart(c, nowMs);
    return current ? [seen.curr, seen.prev] : [full ? c.limit : 0, 0];
  },
} as const;

export const fixedWindow = {
  ...windowTraits,
  kind: 'fixed_window' as const,
  readsPrevious: false,
  plainCount: true,
  calendar: true,
  turnMs: (windowMs: number, nowMs: number) => windowMs - (nowMs % windowMs),
  storeKey: windowKey,
  used: (_c, curr) => curr,
  exceeds: (c, used, n) => used + n > c.limit,
  refundable: (_c, curr) => curr,
  holdsSince: (c, atMs, nowMs) => windowBounds(atMs, c.windowMs, c.calendar).index === windowBounds(nowMs, c.windowMs, c.calendar).index,
  remaining: (c, curr, _prev, counted) => Math.max(0, Math.floor(c.limit - curr - counted)),
  pastLimit: (c, curr, _prev, counted) => curr + counted - c.limit,
  resetAtMs: (c, _curr, _counted, nowMs) => windowEndMs(nowMs, c.windowMs, c.calendar),
  waitMs: (c, curr, prev, nowMs) =>
    c.calendar === 0
      ? retryAfterMs({ windowMs: c.windowMs, limit: c.limit, hits: c.hits, sliding: false }, prev, curr, nowMs)
      : windowEndMs(nowMs, c.windowMs, c.calendar) - nowMs,
  taken: (_c, used) => used,
  series: {
    read(s, c, nowMs, baseMs, i, curr, prev) {
      curr[i] = s !== undefined && s.w === windowSecond(c, nowMs, baseMs) ? s.c : 0;
      prev[i] = 0;
    },
    // Kept a second past its end, as Redis keeps it (a calendar window's end is its own).
    add(s, c, _curr, nowMs, baseMs, hits) {
      const end = addToWindow(s, c, nowMs, baseMs, hits, c.windowMs / 1000 + 1);
      return c.calendar === 0 ? end : (windowBounds(nowMs, c.windowMs, c.calendar).endMs - baseMs) / 1000;
    },
  },
} satisfies LimitAlgorithm;
