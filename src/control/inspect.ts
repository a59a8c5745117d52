import type { CompiledConfig, CompiledDomain, Rule } from '../config/compiled.js';
import { peekWindows } from '../limiter/peek.js';
import { type DescriptorPlan, planForClient, type TierSource, toChecks } from '../limiter/plan.js';
import type { CounterWindow } from '../limits/check.js';
import { ALGORITHMS } from '../limits/kinds/index.js';
import type { Store } from '../store/store.js';

export interface CounterView {
  domain: string;
  rule: string;
  category: string;
  window: string;
  limit: number;
  used: number;
  remaining: number;
  /** Unix seconds when the window resets (a token bucket: when it is full again). */
  resetAt: number;
  /** Set for a token bucket: its capacity (used/remaining are then tokens). */
  burst?: number;
}

interface ClientPlan {
  domain: CompiledDomain;
  rule: Rule;
  plan: DescriptorPlan;
}

/** The plans of the rules whose counters belong to one client alone: the token entry is their only varying
 * value (for the property API: category_read.token, category_reports.token, category_write.token). */
function clientPlans(config: CompiledConfig, tiers: TierSource, fingerprint: string): ClientPlan[] {
  const out: ClientPlan[] = [];
  for (const domain of config.domains.values()) {
    for (const rule of domain.rules) {
      const at = rule.keys.indexOf(domain.tokenKey);
      if (at === -1 || rule.unlimited || !rule.variable.every((v, i) => v === (i === at))) continue;
      out.push({ domain, rule, plan: planForClient(rule, fingerprint, tiers) });
    }
  }
  return out;
}

/** Every window of a client's own counters (to reset them). */
export function tokenWindows(config: CompiledConfig, tiers: TierSource, fingerprint: string): CounterWindow[] {
  return toChecks(
    clientPlans(config, tiers, fingerprint).map((c) => c.plan),
    true,
  ).map((c) => ({ key: c.key, windowMs: c.windowMs, calendar: c.calendar }));
}

/** Current use of every window of a client, read with check-only calls (nothing is counted). */
export async function inspectToken(config: CompiledConfig, tiers: TierSource, store: Store, fingerprint: string): Promise<CounterView[]> {
  const clients = clientPlans(config, tiers, fingerprint);
  const use = await peekWindows(
    store,
    clients.map((c) => c.plan),
  );
  return clients.flatMap(({ domain, rule, plan }, i) =>
    plan.limits.map((limit, j) => ({
      domain: domain.name,
      rule: rule.id,
      category: rule.category,
      window: limit.windowName,
      limit: limit.requestsPerUnit,
      used: use[i]![j]!.used,
      remaining: use[i]![j]!.remaining,
      resetAt: Math.ceil(use[i]![j]!.resetAtMs / 1000),
      ...ALGORITHMS[limit.kind]!.shown(limit),
    })),
  );
}
