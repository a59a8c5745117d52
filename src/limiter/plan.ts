import { calendarMonth, compileLimit } from '../config/compile.js';
import type { CompiledDomain, CompiledLimit, Rule } from '../config/compiled.js';
import { type EntryLike, type MatchStep, matchRule } from '../config/match.js';
import type { Algorithm } from '../config/spec.js';
import { UNITS, type Unit } from '../config/units.js';
import { counterKey, counterKeyOf, overrideCounterKey, reservationKey } from '../counters/keys.js';
import { cachedFingerprint, fingerprint } from '../fingerprint.js';
import { type CounterCheck, opOf, type Reservation, type UsageTag } from '../limits/check.js';
import { ALGORITHMS, DEFAULT_KIND, KIND_CODES } from '../limits/kinds/index.js';
import type { PeerConn } from './slot-keeper.js';
import { usageTag } from './usage-tag.js';

/** What a request counts against, decided in one place: the limiter, explain and the admin API's inspection
 * all plan through here, so they cannot disagree on the rule, the tier, the limits or the counters. */

/** A validated request, in Tollgate's terms. */
export interface DecisionInput {
  domain: string;
  descriptors: DescriptorInput[];
  /** The request's hits (Envoy's 0 already turned into 1). */
  hits: number;
  /** The connection the call came on, named only while a rule has max_hold (limiter/slot-keeper.ts). */
  peer?: PeerConn;
}

export interface DescriptorInput {
  entries: EntryLike[];
  /** Envoy's per-descriptor limit, which wins over the config. */
  override?: { requestsPerUnit: number; unit: Unit };
  /** Envoy's per-descriptor hits_addend, when set (0 = check only). */
  hits?: number;
  /** Envoy 1.38's is_negative_hits: the hits are given back, not taken (a refund). */
  refund?: boolean;
}

/** Which tier a client (by the fingerprint of its token) belongs to. `tierOf` is synchronous on purpose: a
 * decision never waits for a tier lookup; implementations answer from what they already hold. */
export interface TierSource {
  tierOf(fingerprint: string): string | undefined;
  /** How many clients are assigned, for metrics. */
  count?(): number;
}

export const noTiers: TierSource = { tierOf: () => undefined };

export interface PlanContext {
  tiers: TierSource;
  /** Report every decision as it would be, but admit every request. */
  globalShadow: boolean;
  /** QUOTA_MODE: every descriptor is in quota mode (see Rule.quota). */
  globalQuota?: boolean;
  /** STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false: every hit counted past the limit (its fixed_cache_impl.go). */
  globalCharge?: boolean;
  /** CONFIG_TYPE=GRPC_XDS_SOTW,FILE, STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT unset: domains from xDS only. */
  xdsCharge?: boolean;
}

/** What one descriptor counts against. */
export interface DescriptorPlan {
  rule: Rule | undefined;
  tier: string | undefined;
  /** The windows to check, after `replaces`. Empty when nothing limits the descriptor. */
  limits: readonly CompiledLimit[];
  shadow: boolean;
  /** The rule's own shadow_mode: its status says OK even when over, as envoyproxy/ratelimit's base_limiter
   * answers. --shadow-mode (global) leaves statuses as they are and only admits (its ratelimit.go). */
  shadowStatus: boolean;
  /** Quota mode (the rule's quota_mode or QUOTA_MODE): over it, the request is still admitted unless every
   * quota-mode descriptor is over (src/limits/check.ts settle). A shadow one is never over there. */
  quota: boolean;
  /** A quota-mode descriptor that passes whatever the counters say (see quotaPasses): with one in the
   * request, no quota-mode descriptor of it can block. Set by planRequest. */
  quotaPasses?: boolean;
  /** Hits this descriptor asks for (0 = check only). */
  hits: number;
  /** The descriptor's counter key (counters/keys.ts); '' when nothing limits it. */
  key: string;
  /** Envoy's per-descriptor limit replaced the config's. */
  override: boolean;
  /** charge_mode (the rule's, or the service's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false). */
  charge: boolean;
  /** The reservation the request names (its id entry), when the rule takes them. */
  reservation: Reservation | undefined;
  /** Envoy 1.38's is_negative_hits: `hits` are given back to every window, never refused (limits/check.ts). */
  refund?: boolean;
  /** in_flight with request_key: the fingerprint of the request id that holds the slots. */
  slotId?: string;
  /** A refund its rule does not take (`refunds: false`): planned with nothing to check. */
  refundIgnored?: boolean;
  usage?: UsageTag;
}

/** How a plan was reached, for explanations. */
export interface PlanTrace {
  /** Per descriptor: how each entry matched, up to the first that matched nothing. */
  steps: MatchStep[][];
  /** Per descriptor: its limits before `replaces`. */
  configured: (readonly CompiledLimit[])[];
  /** Name of each limit dropped by `replaces` → name of the limit that dropped it. */
  replacedBy: ReadonlyMap<string, string>;
}

/** The plan of every descriptor of a request. Allocates only the plans (and a trace when asked for). */
export function planRequest(
  domain: CompiledDomain | undefined,
  request: Pick<DecisionInput, 'descriptors' | 'hits'>,
  ctx: PlanContext,
  trace?: PlanTrace,
): DescriptorPlan[] {
  const n = request.descriptors.length;
  const plans = new Array<DescriptorPlan>(n);
  // Beside a config directory, a domain from xDS counts as envoyproxy/ratelimit would (PlanContext.xdsCharge).
  const c = domain?.fromXds && ctx.xdsCharge ? { ...ctx, globalCharge: true } : ctx;
  for (let i = 0; i < n; i++) {
    const steps: MatchStep[] | undefined = trace ? [] : undefined;
    if (trace) trace.steps[i] = steps!;
    const d = request.descriptors[i]!;
    plans[i] = planDescriptor(domain, d, request.hits, c, steps);
    if (d.refund) refundOf(plans[i]!);
    if (plans[i]!.rule?.inFlight?.requestKey !== undefined && plans[i]!.slotId === undefined) withoutId(plans[i]!);
    if (plans[i]!.rule?.usage && !d.override) plans[i]!.usage = usageTag(plans[i]!.rule!, d.entries);
    if (trace) trace.configured[i] = plans[i]!.limits;
  }
  const replacedBy = dropReplaced(plans);
  if (trace && replacedBy) trace.replacedBy = replacedBy;
  for (const p of plans) if (p.refundIgnored) p.limits = [];
  for (const p of plans) p.quotaPasses = quotaPasses(p, ctx.globalQuota ?? false);
  return plans;
}

/** planRequest with its trace. */
export function traceRequest(
  domain: CompiledDomain | undefined,
  request: Pick<DecisionInput, 'descriptors' | 'hits'>,
  ctx: PlanContext,
): { plans: DescriptorPlan[]; trace: PlanTrace } {
  const trace: PlanTrace = { steps: [], configured: [], replacedBy: new Map() };
  return { plans: planRequest(domain, request, ctx, trace), trace };
}

function planDescriptor(
  domain: CompiledDomain | undefined,
  d: DescriptorInput,
  requestHits: number,
  ctx: PlanContext,
  steps: MatchStep[] | undefined,
): DescriptorPlan {
  const hits = d.hits ?? requestHits;
  // A request id is matched apart: only a domain with reservation or in-flight rules looks for one (compiled
  // once). Envoy's own limit never takes a reservation, nor replaces an in-flight rule's slots.
  if (domain && (domain.reservationKeys.size > 0 || domain.slotKeys.size > 0)) {
    const planned = reservationPlan(domain, d, hits, ctx, steps);
    if (planned) return planned;
  }
  const rule = domain && matchRule(domain, d.entries, steps);
  if (rule?.inFlight && d.override) return planDescriptor(domain, { ...d, override: undefined }, requestHits, ctx, undefined);
  // Envoy's own limit takes neither the rule's shadow_mode nor its quota_mode (envoyproxy/ratelimit's
  // GetLimit builds it with both off), nor its charge_mode; the service-wide modes still apply.
  const mode = modesOf(rule, !!d.override, ctx);
  if (!domain) return unlimited(rule, mode, hits);
  if (d.override) {
    // With a matching rule, Envoy's limit counts on the rule's counters; without one, on counters of its own.
    const key = rule ? counterKey(rule.counterId, rule.variable, d.entries) : overrideCounterKey(domain.name, d.entries);
    const limit = compileLimit(
      { unit: d.override.unit, requestsPerUnit: d.override.requestsPerUnit, name: undefined, replaces: [], calendar: calendarMonth(domain, d.override.unit) },
      domain.name,
      'override',
      overriddenAlgorithm(rule, d.override.unit, d.override.requestsPerUnit),
    );
    return { rule, tier: undefined, limits: [limit], ...mode, hits, key, override: true };
  }
  if (!rule || rule.unlimited) return unlimited(rule, mode, hits);
  // The token's fingerprint is computed only for rules that have tier limits.
  const client = rule.tierLimits.size > 0 ? tokenFingerprint(domain, d.entries) : undefined;
  return rulePlan(rule, client, counterKey(rule.counterId, rule.variable, d.entries), hits, mode, ctx.tiers);
}

type Modes = Pick<DescriptorPlan, 'shadow' | 'shadowStatus' | 'quota' | 'charge' | 'reservation'>;

function modesOf(rule: Rule | undefined, override: boolean, ctx: PlanContext): Modes {
  const ruleShadow = !override && (rule?.shadow ?? false);
  return {
    shadow: ruleShadow || ctx.globalShadow,
    shadowStatus: ruleShadow,
    // An in-flight rule is never in quota mode (QUOTA_MODE included): a slot is held or it is not.
    quota: !rule?.inFlight && ((!override && (rule?.quota ?? false)) || (ctx.globalQuota ?? false)),
    charge: (!override && (rule?.charge ?? false)) || (ctx.globalCharge ?? false),
    reservation: undefined,
  };
}

/** A descriptor whose last entry is a request id: its rule is the one the entries before it reach, when that
 * rule takes reservations under that key; the id is then no part of the counter. Any other descriptor is
 * planned as usual (undefined). A descriptor without the id is a plain charge. */
function reservationPlan(
  domain: CompiledDomain,
  d: DescriptorInput,
  hits: number,
  ctx: PlanContext,
  steps: MatchStep[] | undefined,
): DescriptorPlan | undefined {
  const last = d.entries[d.entries.length - 1];
  if (!last || !(domain.reservationKeys.has(last.key) || domain.slotKeys.has(last.key))) return undefined;
  const entries = d.entries.slice(0, -1);
  const rule = matchRule(domain, entries);
  const settles = rule !== undefined && rule.settlementKey === last.key;
  const holds = rule?.inFlight !== undefined && rule.inFlight.requestKey === last.key;
  if (!rule || (rule.reservationKey !== last.key && !settles && !holds) || rule.unlimited || (d.override && !holds)) return undefined;
  if (steps) matchRule(domain, entries, steps);
  const key = counterKey(rule.counterId, rule.variable, entries);
  const mode = modesOf(rule, false, ctx);
  if (!holds) mode.reservation = { key: reservationKey(key), id: fingerprint(last.value), ttlMs: rule.reservationTtlMs, settles };
  const client = rule.tierLimits.size > 0 ? tokenFingerprint(domain, entries) : undefined;
  const plan = rulePlan(rule, client, key, hits, mode, ctx.tiers);
  // An id of any length is taken by its fingerprint (the request's own bounds bound it): refusing a long one
  // failed the whole call, and an Envoy that lets a failed call through (failure_mode_deny: false) let whoever
  // sets the header past the limit. An empty id names no request: it may hold no slot (a limit of 0), so its
  // take is refused, never admitted unheld; a check (hits 0) or a give-back with it reads as any other.
  if (holds && last.value === '' && hits > 0 && !d.refund) plan.limits = plan.limits.map((l) => ({ ...l, requestsPerUnit: 0 }));
  if (holds) plan.slotId = fingerprint(last.value);
  return plan;
}

/** A refund takes no reservation (it names none: its id entry, if any, still picks the rule): it only gives
 * back. */
function refundOf(p: DescriptorPlan): void {
  p.reservation = undefined;
  // A rule with `refunds: false` gives nothing back: nothing is checked either (a stream's end is never
  // refused, nor a 429; its limits are dropped after `replaces` is applied, which they still take part in),
  // and it is counted as ignored.
  if (p.rule?.refunds === false) [p.hits, p.refundIgnored] = [0, true];
  else p.refund = true;
}

/** A descriptor of an in-flight rule with a request_key that does not name the request (its last entry is
 * not the key): only a check. Taking or giving back slots no id holds would free other requests' slots. */
function withoutId(p: DescriptorPlan): void {
  p.hits = 0;
  p.refund = undefined;
}

/** A quota-mode descriptor that passes whatever the counters say, as envoyproxy/ratelimit counts it
 * (src/service/ratelimit.go): one with limits whose status is OK by its rule's shadow_mode, or, under
 * QUOTA_MODE only, one nothing limits (no rule, or every limit replaced: its limit is nil there, so only the
 * global mode makes it a quota descriptor; an unlimited rule is never counted). With one in the request, not
 * every quota-mode descriptor can be over, so none of them may block it. */
function quotaPasses(p: DescriptorPlan, globalQuota: boolean): boolean {
  if (p.limits.length === 0) return globalQuota && !(p.rule?.unlimited && !p.override);
  return p.quota && p.shadowStatus;
}

/** A descriptor nothing limits: an unknown domain, no rule, or an unlimited rule (without Envoy's limit). */
function unlimited(rule: Rule | undefined, mode: Modes, hits: number): DescriptorPlan {
  return { rule, tier: undefined, limits: [], ...mode, hits, key: '', override: false };
}

/** Envoy's limit keeps the algorithm of the rule's limit it stands in for (same unit), else the rule's; a
 * bucket's burst is then Envoy's requests_per_unit. A bucket too large to be kept exactly (burst × window
 * past 2^53 ticks, which the config refuses for its own limits) is a fixed window of the same numbers
 * instead: Redis's doubles would overflow where the memory store would not, and the stores would disagree. */
function overriddenAlgorithm(rule: Rule | undefined, unit: Unit, requestsPerUnit: number): Algorithm {
  const fallback = DEFAULT_KIND as Algorithm;
  if (!rule) return fallback;
  let algorithm = rule.algorithm;
  for (const l of rule.limits) if (l.unit === unit && !ALGORITHMS[l.kind]!.slots) algorithm = l.algorithm as Algorithm;
  return ALGORITHMS[KIND_CODES[algorithm]]!.exact(requestsPerUnit, UNITS[unit].seconds * 1000) ? algorithm : fallback;
}

/** The plan of a rule for a client known only by the fingerprint of its token, on a rule where the token is
 * the only value that varies (the admin API: a client's own counters). Counts nothing (hits 0). */
export function planForClient(rule: Rule, fingerprint: string, tiers: TierSource): DescriptorPlan {
  return rulePlan(
    rule,
    fingerprint,
    counterKeyOf(rule.counterId, fingerprint),
    0,
    { shadow: rule.shadow, shadowStatus: rule.shadow, quota: rule.quota, charge: rule.charge, reservation: undefined },
    tiers,
  );
}

/** The tier lookup: a client's tier, when the rule has tier limits, holds it to that tier's limits (if the
 * rule has some for it), else the rule's own. */
function rulePlan(rule: Rule, client: string | undefined, key: string, hits: number, mode: Modes, tiers: TierSource): DescriptorPlan {
  const tier = client !== undefined && rule.tierLimits.size > 0 ? tiers.tierOf(client) : undefined;
  const limits = (tier !== undefined && rule.tierLimits.get(tier)) || rule.limits;
  // The modes field by field, not spread: every decision makes one, and a spread copies generically.
  const { shadow, shadowStatus, quota, charge, reservation } = mode;
  return { rule, tier, limits, shadow, shadowStatus, quota, charge, reservation, hits, key, override: false };
}

/** The fingerprint of the descriptor's token entry (the domain's token_key), if it has one. */
function tokenFingerprint(domain: CompiledDomain, entries: readonly EntryLike[]): string | undefined {
  for (const e of entries) {
    if (e.key === domain.tokenKey) return cachedFingerprint(e.value);
  }
  return undefined;
}

/** The `replaces` rule: a limit named in another matched limit's `replaces`, in any descriptor of the
 * request, does not apply to it. Returns who replaced what, when anything was. */
function dropReplaced(plans: DescriptorPlan[]): Map<string, string> | undefined {
  let replacedBy: Map<string, string> | undefined;
  for (const p of plans) {
    for (const l of p.limits) {
      if (l.replaces.length === 0) continue;
      replacedBy ??= new Map();
      for (const name of l.replaces) replacedBy.set(name, l.name);
    }
  }
  if (!replacedBy) return undefined;
  for (const p of plans) p.limits = p.limits.filter((l) => !replacedBy.has(l.name));
  return replacedBy;
}

/** The store calls of a plan: one per window, grouped by descriptor. `peek`: read only (nothing counted,
 * nothing blocked), for explanations and inspection. */
export function toChecks(plans: readonly DescriptorPlan[], peek = false): CounterCheck[] {
  let count = 0; // sized up front: a push onto [] allocates room for 17, and most requests have one or two windows
  for (const p of plans) count += p.limits.length;
  const checks = new Array<CounterCheck>(count);
  let at = 0;
  const quotaCannotBlock = plans.some((p) => p.quotaPasses);
  for (let group = 0; group < plans.length; group++) {
    const p = plans[group]!;
    for (const l of p.limits) {
      const a = ALGORITHMS[l.kind]!;
      const slots = a.slots;
      checks[at++] = {
        key: a.storeKey(p.key, l.windowName),
        windowMs: l.windowSeconds * 1000,
        limit: l.requestsPerUnit,
        op: peek ? 'check' : opOf(p.refund === true, p.hits, slots),
        hits: peek ? 0 : p.hits,
        kind: l.kind,
        burst: l.burst,
        group,
        shadow: peek || p.shadow || (p.quota && quotaCannotBlock),
        quota: !peek && p.quota,
        charge: !peek && (p.charge || p.refund === true || slots),
        calendar: l.calendar,
        reservation: peek ? undefined : p.reservation,
        slots: slots ? { id: p.slotId } : undefined,
        usage: peek ? undefined : p.usage,
        spend: !peek && p.rule?.charge === true && !p.override && !p.refund && !slots,
      };
    }
  }
  return checks;
}
