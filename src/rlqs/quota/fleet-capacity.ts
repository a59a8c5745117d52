import { slidingUsed } from '../../counters/window.js';
import type { CheckResult } from '../../limits/check.js';
import { ALGORITHMS } from '../../limits/kinds/index.js';
import type { BucketPlan } from './bucket-plan.js';

/** The rate, in requests a second, the whole fleet may admit for a bucket until the next assignment, from its
 * limits: a short window (or a token bucket) allows its limit over its length, less what RLS decisions on the
 * same descriptor admitted over the last window's length (read from the same counters: RLS keeps its room, and
 * RLQS gets what RLS leaves); a long window allows what is left of it over `horizonMs` (one report interval, or
 * less when the window turns sooner): the next reports count what was admitted, and each assignment gives out
 * what is left then, so the rate shrinks as the quota runs out. `spent`: a long window has nothing left, so the
 * bucket is refused outright until it turns. */
export interface FleetCapacity {
  ratePerSecond: number;
  spent: boolean;
  /** What is left of the tightest long window (Infinity without one): no instance's burst may exceed its share. */
  left: number;
}

/** `counts`: the store's answer to the report's checks, this plan's from index `from`: its quota checks, counted
 * before this report's `allowed` requests were added to them, then its RLS windows' reads. */
export function fleetCapacity(plan: BucketPlan, counts: CheckResult | undefined, from: number, allowed: number, horizonMs: number): FleetCapacity {
  let rate = Infinity;
  let least = Infinity;
  for (const l of plan.rates) rate = Math.min(rate, l.requestsPerUnit / l.windowSeconds);
  plan.rlsWindows.forEach(({ limit }, i) => {
    const at = from + plan.quotas.length + i;
    const rls = counts ? slidingUsed(counts.prev[at] ?? 0, counts.curr[at] ?? 0, counts.nowMs, limit.windowSeconds * 1000) : 0;
    rate = Math.min(rate, Math.max(0, limit.requestsPerUnit - rls) / limit.windowSeconds);
  });
  for (let i = 0; i < plan.quotas.length; i++) {
    const { limit, check } = plan.quotas[i]!;
    const curr = counts?.curr[from + i] ?? 0;
    const prev = counts?.prev[from + i] ?? 0;
    const nowMs = counts?.nowMs ?? 0;
    const windowMs = limit.windowSeconds * 1000;
    const used = ALGORITHMS[check.kind]!.used(check, curr, prev, nowMs) + allowed;
    const left = limit.requestsPerUnit - used;
    if (left < 1) return { ratePerSecond: 0, spent: true, left: 0 };
    least = Math.min(least, left);
    const untilTurn = ALGORITHMS[check.kind]!.turnMs(windowMs, nowMs);
    const horizon = Math.max(1000, Math.min(horizonMs, untilTurn));
    rate = Math.min(rate, (left * 1000) / horizon);
  }
  return { ratePerSecond: rate, spent: false, left: least };
}
