import { slidingUsed } from '../counters/window.js';
import type { CheckResult } from '../store/store.js';
import type { BucketPlan } from './bucket-plan.js';

/** The rate, in requests a second, the whole fleet may admit for a bucket until the next assignment, from its
 * limits: a short window (or a token bucket) allows its limit over its length; a long window allows what is
 * left of it, spread over `horizonMs` (two report intervals, or less when the window turns sooner): spent at
 * that pace, the quota lasts until the reports after next have counted what was admitted. `spent`: a long
 * window has nothing left, so the bucket is refused outright until it turns. */
export interface FleetCapacity {
  ratePerSecond: number;
  spent: boolean;
}

/** `counts`: the store's answer to the plan's quota checks, the first `from` of them; `hits` were just counted. */
export function fleetCapacity(plan: BucketPlan, counts: CheckResult | undefined, from: number, horizonMs: number): FleetCapacity {
  let rate = Infinity;
  for (const l of plan.rates) rate = Math.min(rate, l.requestsPerUnit / l.windowSeconds);
  for (let i = 0; i < plan.quotas.length; i++) {
    const { limit, check } = plan.quotas[i]!;
    const curr = counts?.curr[from + i] ?? 0;
    const prev = counts?.prev[from + i] ?? 0;
    const nowMs = counts?.nowMs ?? 0;
    const windowMs = limit.windowSeconds * 1000;
    const used = (check.sliding ? slidingUsed(prev, curr, nowMs, windowMs) : curr) + check.hits;
    const left = limit.requestsPerUnit - used;
    if (left < 1) return { ratePerSecond: 0, spent: true };
    const untilTurn = check.sliding ? windowMs : windowMs - (nowMs % windowMs);
    const horizon = Math.max(1000, Math.min(horizonMs, untilTurn));
    rate = Math.min(rate, (left * 1000) / horizon);
  }
  return { ratePerSecond: rate, spent: false };
}
