import type { CompiledConfig, CompiledDomain, CompiledLimit, Rule } from '../config/compiled.js';
import { counterId } from '../config/compile.js';
import { matchRule, type EntryLike } from '../config/match.js';
import { UNITS, type Unit } from '../config/units.js';
import { cachedFingerprint } from '../fingerprint.js';
import type { CheckResult, CounterCheck, Maybe, Store } from '../store/store.js';
import { noTiers, type TierSource } from '../control/tier-store.js';
import { systemClock, type Clock } from './clock.js';
import { limitsFor, windowKey } from './peek.js';
import { retryAfterMs, slidingUsed, windowStartMs } from './window.js';

/** A validated request, in Tollgate's terms. */
export interface DecisionInput {
  domain: string;
  descriptors: DescriptorInput[];
  /** The request's hits (Envoy's 0 already turned into 1). */
  hits: number;
}

export interface DescriptorInput {
  entries: EntryLike[];
  /** Envoy's per-descriptor limit, which wins over the config. */
  override?: { requestsPerUnit: number; unit: Unit };
  /** Envoy's per-descriptor hits_addend, when set (0 = check only). */
  hits?: number;
}

export interface WindowState {
  limit: CompiledLimit;
  /** What is left after this request was (or was not) counted. */
  remaining: number;
  resetAtMs: number;
  over: boolean;
  /** When over: milliseconds until the request would fit. */
  retryAfterMs: number;
}

export interface DescriptorOutcome {
  rule: Rule | undefined;
  /** Hits this descriptor asked for (0 = check only). */
  hits: number;
  tier: string | undefined;
  shadow: boolean;
  over: boolean;
  /** Empty when nothing limits this descriptor (no rule, unlimited, or all its limits replaced). */
  windows: WindowState[];
}

export interface Decision {
  domain: CompiledDomain | undefined;
  overLimit: boolean;
  nowMs: number;
  descriptors: DescriptorOutcome[];
  /** When over limit: milliseconds until every blocking window has room. */
  retryAfterMs: number;
  /** Who answered: the store, the local over-limit cache, the local fallback, the failure policy, or nobody
   * (nothing limited the request). */
  source: NonNullable<CheckResult['source']> | 'none';
}

export interface LimiterDeps {
  config: () => CompiledConfig;
  store: Store;
  tiers?: TierSource;
  /** Report every decision as it would be, but admit every request. */
  globalShadow?: boolean;
  /** Only for decisions that reach no store (nothing limits them); otherwise the store's clock rules. */
  clock?: Clock;
}

interface Plan {
  rule: Rule | undefined;
  tier: string | undefined;
  limits: readonly CompiledLimit[];
  shadow: boolean;
  sliding: boolean;
  hits: number;
  /** Counter identity of the descriptor (rule plus fingerprints of its variable values). */
  key: string;
}

/** Decides requests: matches descriptors to rules, checks all their windows in one store call. */
export class Limiter {
  private readonly tiers: TierSource;
  constructor(private readonly deps: LimiterDeps) {
    this.tiers = deps.tiers ?? noTiers;
  }

  /** The decision, at once when the store answers at once (see Maybe). */
  decide(input: DecisionInput): Maybe<Decision> {
    const domain = this.deps.config().domains.get(input.domain);
    const plans = input.descriptors.map((d) => this.plan(domain, d, input.hits));
    dropReplaced(plans);
    const checks = toChecks(plans);
    if (checks.length === 0) return unlimitedDecision(domain, plans, (this.deps.clock ?? systemClock).now());
    const result = this.deps.store.check(checks);
    if (result instanceof Promise) return result.then((r) => assemble(domain, plans, checks, r));
    return assemble(domain, plans, checks, result);
  }

  private plan(domain: CompiledDomain | undefined, d: DescriptorInput, requestHits: number): Plan {
    const hits = d.hits ?? requestHits;
    const rule = domain && matchRule(domain, d.entries);
    const shadow = (rule?.shadow ?? false) || (this.deps.globalShadow ?? false);
    const sliding = rule?.algorithm === 'sliding_window';
    if (domain && d.override) {
      const limit = overrideLimit(d.override.unit, d.override.requestsPerUnit, domain.name);
      return { rule, tier: undefined, limits: [limit], shadow, sliding, hits, key: overrideKey(domain.name, rule, d.entries) };
    }
    if (!rule || rule.unlimited) return { rule, tier: undefined, limits: [], shadow, sliding, hits, key: '' };
    const tier = rule.tierLimits.size > 0 ? this.tierFor(domain, d.entries) : undefined;
    const limits = limitsFor(rule, tier);
    return { rule, tier, limits, shadow, sliding, hits, key: counterKey(rule.counterId, rule.variable, d.entries) };
  }

  private tierFor(domain: CompiledDomain, entries: readonly EntryLike[]): string | undefined {
    for (const e of entries) {
      if (e.key === domain.tokenKey) return this.tiers.tierOf(cachedFingerprint(e.value));
    }
    return undefined;
  }
}

/** A limit named in another matched limit's `replaces` does not apply to this request. */
function dropReplaced(plans: Plan[]): void {
  let replaced: Set<string> | undefined;
  for (const p of plans) {
    for (const l of p.limits) {
      for (const name of l.replaces) (replaced ??= new Set()).add(name);
    }
  }
  if (!replaced) return;
  for (const p of plans) p.limits = p.limits.filter((l) => !replaced.has(l.name));
}

function toChecks(plans: Plan[]): CounterCheck[] {
  const checks: CounterCheck[] = [];
  for (let group = 0; group < plans.length; group++) {
    const p = plans[group]!;
    for (const l of p.limits) {
      checks.push({
        key: windowKey(p.key, l),
        windowMs: l.windowSeconds * 1000,
        limit: l.requestsPerUnit,
        hits: p.hits,
        sliding: p.sliding,
        group,
        shadow: p.shadow,
      });
    }
  }
  return checks;
}

function assemble(domain: CompiledDomain | undefined, plans: Plan[], checks: CounterCheck[], r: CheckResult): Decision {
  const outcomes = plans.map(outcomeOf);
  for (let i = 0; i < checks.length; i++) {
    if (r.over[i]) outcomes[checks[i]!.group]!.over = true;
  }
  let retry = 0;
  for (let i = 0; i < checks.length; i++) {
    const c = checks[i]!;
    const o = outcomes[c.group]!;
    const prev = r.prev[i]!;
    const curr = r.curr[i]!;
    const used = c.sliding ? slidingUsed(prev, curr, r.nowMs, c.windowMs) : curr;
    const counted = r.admitted && !o.over ? c.hits : 0;
    const over = r.over[i]!;
    const wait = over ? (r.retryAfterMs ?? retryAfterMs(c, prev, curr, r.nowMs)) : 0;
    if (over && !c.shadow) retry = Math.max(retry, wait);
    const limit = plans[c.group]!.limits[o.windows.length]!;
    o.windows.push({
      limit,
      remaining: Math.max(0, Math.floor(c.limit - used - counted)),
      resetAtMs: windowStartMs(r.nowMs, c.windowMs) + c.windowMs,
      over,
      retryAfterMs: wait,
    });
  }
  return { domain, overLimit: !r.admitted, nowMs: r.nowMs, descriptors: outcomes, retryAfterMs: retry, source: r.source ?? 'store' };
}

function unlimitedDecision(domain: CompiledDomain | undefined, plans: Plan[], nowMs: number): Decision {
  return {
    domain,
    overLimit: false,
    nowMs,
    descriptors: plans.map(outcomeOf),
    retryAfterMs: 0,
    source: 'none',
  };
}

function outcomeOf(p: Plan): DescriptorOutcome {
  return { rule: p.rule, hits: p.hits, tier: p.tier, shadow: p.shadow, over: false, windows: [] };
}

/** Counter identity: the rule, then the fingerprint of every value the rule does not fix (wildcards and
 * default keys), so each token gets its own counter and no raw value reaches a key. */
export function counterKey(ruleCounterId: string, variable: readonly boolean[], entries: readonly EntryLike[]): string {
  let values = '';
  for (let i = 0; i < variable.length; i++) {
    if (variable[i]) values += (values === '' ? '' : '.') + cachedFingerprint(entries[i]!.value);
  }
  return counterKeyOf(ruleCounterId, values);
}

/** The key from fingerprints already computed (joined by '.'). The braces are a Redis Cluster hash tag, so
 * all windows of one descriptor share a slot: one client's counters hash by its fingerprints, a rule without
 * varying values (one shared counter) by the rule itself. */
export function counterKeyOf(ruleCounterId: string, fingerprints: string): string {
  return fingerprints === '' ? `{${ruleCounterId}}` : `${ruleCounterId}:{${fingerprints}}`;
}

function overrideKey(domain: string, rule: Rule | undefined, entries: readonly EntryLike[]): string {
  // With a matching rule the override shares its counters; without one, every value is part of the identity.
  if (rule) return counterKey(rule.counterId, rule.variable, entries);
  // The entry keys come from the request: only their fingerprint reaches the key, so its length is bounded.
  const id = counterId(domain, `~override.${cachedFingerprint(JSON.stringify(entries.map((e) => e.key)))}`);
  return counterKey(id, entries.map(() => true), entries);
}

function overrideLimit(unit: Unit, requestsPerUnit: number, domain: string): CompiledLimit {
  return {
    unit,
    unitCode: UNITS[unit].code,
    windowSeconds: UNITS[unit].seconds,
    requestsPerUnit,
    name: `${domain}.override.per_${unit}`,
    replaces: [],
  };
}
