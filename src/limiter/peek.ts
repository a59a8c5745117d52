import { ALGORITHMS } from '../limits/kinds/index.js';
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
    const a = ALGORITHMS[c.kind]!;
    const used = a.used(c, r.curr[i]!, r.prev[i]!, r.nowMs);
    out[c.group]!.push({
      used: Math.round(a.taken(c, used) * 100) / 100,
      remaining: a.remaining(c, r.curr[i]!, r.prev[i]!, 0, r.nowMs),
      full: a.exceeds(c, used, 1),
      resetAtMs: a.resetAtMs(c, r.curr[i]!, 0, r.nowMs),
    });
  });
  return out;
}
