import type { CompiledConfig, CompiledDomain, CompiledLimit, Rule } from '../config/compiled.js';
import { counterKeyOf } from '../limiter/limiter.js';
import { slidingUsed, windowStartMs } from '../limiter/window.js';
import type { CounterCheck, CounterWindow, Store } from '../store/store.js';
import type { TierSource } from './tier-store.js';

export interface CounterView {
  domain: string;
  rule: string;
  category: string;
  window: string;
  limit: number;
  used: number;
  remaining: number;
  /** Unix seconds when the window resets. */
  resetAt: number;
}

interface TokenRule {
  domain: CompiledDomain;
  rule: Rule;
  limits: readonly CompiledLimit[];
  key: string;
}

/** The rules whose counters belong to one client alone: the token entry is their only varying value (for
 * the property API: category_read.token, category_reports.token, category_write.token). */
function tokenRules(config: CompiledConfig, tiers: TierSource, fingerprint: string): TokenRule[] {
  const tier = tiers.tierOf(fingerprint);
  const out: TokenRule[] = [];
  for (const domain of config.domains.values()) {
    for (const rule of domain.rules) {
      const at = rule.keys.indexOf(domain.tokenKey);
      if (at === -1 || rule.unlimited || !rule.variable.every((v, i) => v === (i === at))) continue;
      const limits = (tier !== undefined && rule.tierLimits.get(tier)) || rule.limits;
      out.push({ domain, rule, limits, key: counterKeyOf(rule.counterId, fingerprint) });
    }
  }
  return out;
}

export function tokenWindows(config: CompiledConfig, tiers: TierSource, fingerprint: string): CounterWindow[] {
  return tokenRules(config, tiers, fingerprint).flatMap((t) => t.limits.map((l) => ({ key: `${t.key}:${l.unit}`, windowMs: l.windowSeconds * 1000 })));
}

/** Current use of every window of a client, read with check-only calls (nothing is counted). */
export async function inspectToken(config: CompiledConfig, tiers: TierSource, store: Store, fingerprint: string): Promise<CounterView[]> {
  const rules = tokenRules(config, tiers, fingerprint);
  const checks: CounterCheck[] = [];
  const owners: { t: TokenRule; l: CompiledLimit }[] = [];
  rules.forEach((t, group) => {
    for (const l of t.limits) {
      checks.push({ key: `${t.key}:${l.unit}`, windowMs: l.windowSeconds * 1000, limit: l.requestsPerUnit, hits: 0, sliding: t.rule.algorithm === 'sliding_window', group, shadow: true });
      owners.push({ t, l });
    }
  });
  if (checks.length === 0) return [];
  const r = await store.check(checks);
  return checks.map((c, i) => {
    const { t, l } = owners[i]!;
    const used = c.sliding ? slidingUsed(r.prev[i]!, r.curr[i]!, r.nowMs, c.windowMs) : r.curr[i]!;
    return {
      domain: t.domain.name,
      rule: t.rule.id,
      category: t.rule.category,
      window: l.unit,
      limit: l.requestsPerUnit,
      used: Math.round(used * 100) / 100,
      remaining: Math.max(0, Math.floor(l.requestsPerUnit - used)),
      resetAt: Math.ceil((windowStartMs(r.nowMs, c.windowMs) + c.windowMs) / 1000),
    };
  });
}
