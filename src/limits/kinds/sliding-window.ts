import { windowKey } from '../../counters/keys.js';
import { retryAfterMs, slidingUsed, windowStartMs } from '../../counters/window.js';
import type { LimitAlgorithm } from './algorithm.js';
import { addToWindow, fixedWindow } from './fixed-window.js';

/** Sliding windows: fixed windows of counts, the previous one weighted by how much of it still overlaps the
 * last window's length (counters/window.ts slidingUsed). Always epoch-aligned. Redis: lua/sliding.lua. */
export const slidingWindow = {
  ...fixedWindow,
  kind: 'sliding_window' as const,
  readsPrevious: true,
  plainCount: false,
  calendar: false,
  // The window slides: a full window's length before all it counts has left it.
  turnMs: (windowMs: number) => windowMs,
  storeKey: windowKey,
  used: (c, curr, prev, nowMs) => slidingUsed(prev, curr, nowMs, c.windowMs),
  // A sliding estimate rounds down.
  remaining: (c, curr, prev, counted, nowMs) => Math.max(0, Math.floor(c.limit - slidingUsed(prev, curr, nowMs, c.windowMs) - counted)),
  pastLimit: (c, curr, prev, counted, nowMs) => slidingUsed(prev, curr, nowMs, c.windowMs) + counted - c.limit,
  waitMs: (c, curr, prev, nowMs) => retryAfterMs({ windowMs: c.windowMs, limit: c.limit, hits: c.hits, sliding: true }, prev, curr, nowMs),
  series: {
    read(s, c, nowMs, baseMs, i, curr, prev) {
      const start = (windowStartMs(nowMs, c.windowMs) - baseMs) / 1000;
      curr[i] = s !== undefined && s.w === start ? s.c : 0;
      prev[i] = s === undefined ? 0 : s.w === start ? s.p : s.w === start - c.windowMs / 1000 ? s.c : 0;
    },
    // Its count is still read as "previous" during the next window.
    add: (s, c, _curr, nowMs, baseMs, hits) => addToWindow(s, c, nowMs, baseMs, hits, (2 * c.windowMs) / 1000),
  },
} satisfies LimitAlgorithm;
