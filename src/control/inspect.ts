import type { CompiledConfig, CompiledDomain, CompiledLimit, Rule } from '../config/compiled.js';
import { counterKeyOf } from '../limiter/limiter.js';
import { limitsFor, peekWindows, windowKey } from '../limiter/peek.js';
import type { CounterWindow, Store } from '../store/store.js';
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
      out.push({ domain, rule, limits: limitsFor(rule, tier), key: counterKeyOf(rule.counterId, fingerprint) });
    }
  }
  return out;
}

export function tokenWindows(config: CompiledConfig, tiers: TierSource, fingerprint: string): CounterWindow[] {
  return tokenRules(config, tiers, fingerprint).flatMap((t) => t.limits.map((l) => ({ key: windowKey(t.key, l), windowMs: l.windowSeconds * 1000 })));
}

/** Current use of every window of a client, read with check-only calls (nothing is counted). */
export async function inspectToken(config: CompiledConfig, tiers: TierSource, store: Store, fingerprint: string): Promise<CounterView[]> {
  const windows = tokenRules(config, tiers, fingerprint).flatMap((t) => t.limits.map((limit) => ({ t, limit })));
  const use = await peekWindows(store, windows.map(({ t, limit }) => ({ key: t.key, limit, sliding: t.rule.algorithm === 'sliding_window' })));
  return windows.map(({ t, limit }, i) => ({
    domain: t.domain.name,
    rule: t.rule.id,
    category: t.rule.category,
    window: limit.unit,
    limit: limit.requestsPerUnit,
    used: use[i]!.used,
    remaining: use[i]!.remaining,
    resetAt: Math.ceil(use[i]!.resetAtMs / 1000),
  }));
}
