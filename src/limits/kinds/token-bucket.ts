import { bucketDebt, bucketFullInMs, bucketRemaining, bucketRetryMs } from '../../counters/bucket.js';
import { bucketKey } from '../../counters/keys.js';
import type { CounterCheck } from '../check.js';
import type { LimitAlgorithm, LimitShape, SeenSpan } from './algorithm.js';

/** Token buckets (GCRA, counters/bucket.ts): a debt in ticks of 1/limit ms, paid back at `limit` ticks a ms;
 * `burst` requests fit in an empty one. Redis: lua/bucket.lua. */
export const tokenBucket = {
  kind: 'token_bucket' as const,
  slots: false,
  refills: true,
  readsPrevious: false,
  plainCount: false,
  // A bucket has no boundary to keep.
  calendar: false,
  configKeys: ['burst'],
  weight: 1,
  burstOf: (requestsPerUnit: number, burst: number | undefined) => burst ?? requestsPerUnit,
  // Kept in ticks of 1/limit ms, up to burst × window: past 2^53 a double (JavaScript's, Redis's Lua's) is no
  // longer exact, and the stores would stop agreeing.
  exact: (capacity: number, windowMs: number) => capacity * windowMs <= Number.MAX_SAFE_INTEGER,
  capacity: (l: LimitShape) => l.burst,
  per: (l: { unit: string }) => `per ${l.unit}`,
  shown: (l: LimitShape) => ({ burst: l.burst }),
  // Refilled a little every moment: what is left is spread over the next second at least (the caller's floor).
  turnMs: () => 0,
  spanStartMs: (_c: CounterCheck, nowMs: number) => nowMs,
  // The debt as last seen, paid back since; unseen and full: as full as it can be.
  fromCache: (c: CounterCheck, seen: SeenSpan | undefined, full: boolean, nowMs: number): [number, number] => [
    seen ? bucketDebt(seen.curr, seen.start, nowMs, c.limit) : full ? c.burst * c.windowMs : 0,
    0,
  ],
  storeKey: bucketKey,
  used: (_c, curr) => curr,
  exceeds: (c, used, n) => used + n * c.windowMs > c.burst * c.windowMs,
  share: (c, used) => used / (c.burst * c.windowMs),
  refundable: (c, curr) => Math.ceil(curr / c.windowMs),
  // A bucket has no windows: a settlement gives back whenever it comes (never fuller than its burst).
  holdsSince: () => true,
  remaining: (c, curr, _prev, counted) => bucketRemaining(Math.max(0, curr + counted * c.windowMs), c.windowMs, c.burst),
  pastLimit: (c, curr, _prev, counted) => Math.max(0, curr + counted * c.windowMs) / c.windowMs - c.burst,
  resetAtMs: (c, curr, counted, nowMs) => nowMs + bucketFullInMs(Math.max(0, curr + counted * c.windowMs), c.windowMs, c.limit),
  waitMs: (c, curr, _prev) => bucketRetryMs(curr, c.hits, c.windowMs, c.burst, c.limit),
  taken: (c, used) => Math.round((used / c.windowMs) * 100) / 100,
  series: {
    read(s, c, nowMs, baseMs, i, curr, prev) {
      curr[i] = s === undefined ? 0 : bucketDebt(s.c, s.w + baseMs, nowMs, c.limit);
      prev[i] = 0;
    },
    // Kept until it is full again (then it reads as empty anyway), plus a second, as in Redis.
    add(s, c, curr, nowMs, baseMs, hits) {
      s.w = nowMs - baseMs;
      s.c = Math.max(0, curr + hits * c.windowMs);
      s.p = 0;
      return Math.ceil((s.w + (c.limit === 0 ? c.windowMs : s.c / c.limit)) / 1000) + 1;
    },
  },
} satisfies LimitAlgorithm;
