import { bucketFits, bucketFullInMs, bucketRemaining } from '../counters/bucket.js';
import { windowEndMs } from '../counters/calendar.js';
import { hasRoom, slidingUsed } from '../counters/window.js';
import type { Store } from '../store/store.js';
import { type DescriptorPlan, toChecks } from './plan.js';

export interface WindowUse {
  /** Requests counted (a token bucket: tokens taken, burst minus what is in it). */
  used: number;
  remaining: number;
  /** No room for one more request. */
  full: boolean;
  resetAtMs: number;
}

/** Current use of every window of these plans (per plan, per limit), read with check-only calls: nothing is
 * counted, nothing is blocked. */
export async function peekWindows(store: Store, plans: readonly DescriptorPlan[]): Promise<WindowUse[][]> {
  const checks = toChecks(plans, true);
  const out: WindowUse[][] = plans.map(() => []);
  if (checks.length === 0) return out;
  const r = await store.check(checks);
  checks.forEach((c, i) => {
    if (c.burst > 0) {
      const debt = r.curr[i]!;
      out[c.group]!.push({
        used: Math.round((debt / c.windowMs) * 100) / 100,
        remaining: bucketRemaining(debt, c.windowMs, c.burst),
        full: !bucketFits(debt, 1, c.windowMs, c.burst),
        resetAtMs: r.nowMs + bucketFullInMs(debt, c.windowMs, c.limit),
      });
      return;
    }
    const used = c.sliding ? slidingUsed(r.prev[i]!, r.curr[i]!, r.nowMs, c.windowMs) : r.curr[i]!;
    out[c.group]!.push({
      used: Math.round(used * 100) / 100,
      remaining: Math.max(0, Math.floor(c.limit - used)),
      full: !hasRoom(used, 1, c.limit),
      // Slots come back when requests end, which nothing predicts (limiter.ts SLOT_WAIT_MS): a second.
      resetAtMs: c.slots ? r.nowMs + 1000 : windowEndMs(r.nowMs, c.windowMs, c.calendar),
    });
  });
  return out;
}
