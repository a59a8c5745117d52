import type { CompiledConfig, CompiledDomain, CompiledLimit, Rule } from '../config/compiled.js';
import { type Clock, systemClock } from '../counters/clock.js';
import { NoConfigError } from '../errors.js';
import type { CheckOp, CheckResult, CounterCheck, ReservationOutcome } from '../limits/check.js';
import { ALGORITHMS } from '../limits/kinds/index.js';
import type { HeldSlot, Maybe, Store, TraceLink } from '../store/store.js';
import { type DecisionInput, type DescriptorPlan, noTiers, type PlanContext, planRequest, type TierSource, toChecks } from './plan.js';
import type { SlotCensusRunner } from './slot-census.js';
import type { PeerConn, SlotKeeper } from './slot-keeper.js';

export type { DecisionInput, DescriptorInput } from './plan.js';

export interface WindowState {
  limit: CompiledLimit;
  /** What is left after this request was (or was not) counted (a bucket: whole tokens). */
  remaining: number;
  /** When the window ends; a bucket: when it is full again. */
  resetAtMs: number;
  over: boolean;
  /** When over: milliseconds until the request would fit. */
  retryAfterMs: number;
  /** The counter's key (fingerprints of its values): for this process's metrics (metrics/budget-share.ts),
   * never shown anywhere. */
  counter: string;
}

export interface DescriptorOutcome {
  rule: Rule | undefined;
  /** Hits this descriptor asked for (0 = check only). */
  hits: number;
  tier: string | undefined;
  /** Never blocks: the rule's shadow_mode or --shadow-mode. */
  shadow: boolean;
  /** The rule's own shadow_mode: the descriptor's status says OK even when over (see DescriptorPlan). */
  shadowStatus: boolean;
  /** Quota mode: blocks only together with every other quota-mode descriptor of the request. */
  quota: boolean;
  /** An unlimited rule, which Envoy hears of as OK with 4294967295 remaining. */
  unlimited: boolean;
  over: boolean;
  /** Empty when nothing limits this descriptor (no rule, unlimited, or all its limits replaced). */
  windows: WindowState[];
  /** What its checks did (limits/check.ts), as the store was told: undefined when nothing limits it. */
  op: CheckOp | undefined;
  /** A refund its rule does not take (`refunds: false`): only checked, and counted. */
  refundIgnored: boolean;
  /** charge_mode: hits counted by a charge or a settlement (the most any window took; a refund is negative),
   * how far past its limit the fullest window now is (a bucket: in tokens), and the reservation's outcome. */
  charged?: number;
  /** A refund (Envoy 1.38's is_negative_hits): the most any window gave back (it holds no less than 0). */
  refunded?: number;
  debt?: number;
  reservation?: ReservationOutcome;
  /** in_flight: what the call did with the descriptor's slots (taken, refused, returned: how many), and how
   * many of its counter's slots it found past their lease. */
  slots?: { event: 'taken' | 'refused' | 'returned'; count: number; expired: number };
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
  /** Reservations the store found expired unsettled while deciding (metrics). */
  expired?: number;
  /** Every limited descriptor settled a reservation (settled, late, unreserved): the call Envoy sends when
   * the stream is done, whose answer it ignores. Kept out of the 429 counts and the 429 log. */
  streamEnd?: boolean;
}

export interface LimiterDeps {
  config: () => CompiledConfig;
  store: Store;
  tiers?: TierSource;
  /** Report every decision as it would be, but admit every request. */
  globalShadow?: boolean;
  /** QUOTA_MODE: every descriptor in quota mode. */
  globalQuota?: boolean;
  /** STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false: every descriptor in charge mode. */
  globalCharge?: boolean;
  xdsCharge?: boolean;
  /** Renews the slots of rules with max_hold while the connection that took them is open. */
  keeper?: SlotKeeper;
  /** Lists the counters in_flight rules took slots on, for the census. */
  census?: SlotCensusRunner;
  /** Only for decisions that reach no store (nothing limits them); otherwise the store's clock rules. */
  clock?: Clock;
}

/** Decides requests: plans every descriptor (plan.ts), checks all their windows in one store call. */
export class Limiter {
  private readonly ctx: PlanContext;
  constructor(private readonly deps: LimiterDeps) {
    this.ctx = {
      tiers: deps.tiers ?? noTiers,
      globalShadow: deps.globalShadow ?? false,
      globalQuota: deps.globalQuota ?? false,
      globalCharge: deps.globalCharge ?? false,
      xdsCharge: deps.xdsCharge ?? false,
    };
  }

  /** The decision, at once when the store answers at once (see Maybe). `trace`: the sampled span this
   * decision is traced under, for the store's batch span. */
  decide(input: DecisionInput, trace?: TraceLink): Maybe<Decision> {
    const config = this.deps.config();
    const domain = config.domains.get(input.domain);
    if (config.pending && !domain) throw new NoConfigError();
    const plans = planRequest(domain, input, this.ctx);
    const checks = toChecks(plans);
    if (checks.length === 0) return unlimitedDecision(domain, plans, (this.deps.clock ?? systemClock).now());
    const result = this.deps.store.check(checks, trace);
    if (result instanceof Promise) return result.then((r) => this.assembled(domain, plans, checks, r, input.peer));
    return this.assembled(domain, plans, checks, result, input.peer);
  }

  private assembled(domain: CompiledDomain | undefined, plans: DescriptorPlan[], checks: CounterCheck[], r: CheckResult, peer: PeerConn | undefined): Decision {
    // Only charges and slots say what they counted: a plain decision pays one look.
    if (r.counted && r.admitted && domain) this.taken(domain.name, plans, checks, r, peer);
    return assemble(domain, plans, checks, r);
  }

  /** The slots this request took: listed for the census, and (rules with max_hold) given to the keeper to renew
   * while `peer`, the connection it came on, stays open. */
  private taken(domain: string, plans: DescriptorPlan[], checks: CounterCheck[], r: CheckResult, peer: PeerConn | undefined): void {
    let held: HeldSlot[] | undefined;
    for (let i = 0; i < checks.length; i++) {
      const c = checks[i]!;
      const rule = plans[c.group]!.rule;
      if (c.op !== 'take' || !rule?.inFlight || !(r.counted![i]! > 0)) continue;
      this.deps.census?.taken(domain, rule, c.key, c.limit);
      const maxHoldMs = rule.inFlight.maxHoldMs;
      if (!maxHoldMs || !peer || !this.deps.keeper || c.slots?.id === undefined) continue;
      held ??= [];
      held.push({ key: c.key, id: c.slots.id, leaseMs: c.windowMs, endMs: r.nowMs + maxHoldMs });
    }
    if (held) this.deps.keeper!.held(peer!, held);
  }
}

function assemble(domain: CompiledDomain | undefined, plans: DescriptorPlan[], checks: CounterCheck[], r: CheckResult): Decision {
  const outcomes = plans.map(outcomeOf);
  for (let i = 0; i < checks.length; i++) {
    if (r.over[i]) outcomes[checks[i]!.group]!.over = true;
  }
  let retry = 0;
  // Per quota-mode descriptor that can block: its longest wait when over (absent when it has room). Made for
  // a request with one: the usual request has none, and allocates neither.
  let quotaGroups: Set<number> | undefined;
  let quotaWait: Map<number, number> | undefined;
  for (let i = 0; i < checks.length; i++) {
    const c = checks[i]!;
    const o = outcomes[c.group]!;
    const prev = r.prev[i]!;
    const curr = r.curr[i]!;
    // A charge or a reservation says what it counted; otherwise an admitted request counted its hits.
    const counted = r.counted ? r.counted[i]! : r.admitted && !o.over ? c.hits : 0;
    const over = r.over[i]!;
    const a = ALGORITHMS[c.kind]!;
    o.op = c.op;
    const wait = !over ? 0 : (r.retryAfterMs ?? a.waitMs(c, curr, prev, r.nowMs));
    if (c.quota && !c.shadow) {
      quotaGroups ??= new Set();
      quotaWait ??= new Map();
      quotaGroups.add(c.group);
    }
    if (over && c.quota && !c.shadow) quotaWait!.set(c.group, Math.max(quotaWait!.get(c.group) ?? 0, wait));
    else if (over && !c.shadow && !c.quota) retry = Math.max(retry, wait);
    const limit = plans[c.group]!.limits[o.windows.length]!;
    if (ALGORITHMS[c.kind]!.slots) noteSlots(o, c, counted, over, r.slotsExpired?.[i] ?? 0);
    else if (r.counted && c.charge) noteCharge(o, c, prev, curr, counted, r);
    const state: WindowState = {
      limit,
      remaining: a.remaining(c, curr, prev, counted, r.nowMs),
      resetAtMs: a.resetAtMs(c, curr, counted, r.nowMs),
      over,
      retryAfterMs: wait,
      counter: c.key,
    };
    pushWindow(o, state);
  }
  if (!r.admitted && quotaGroups && quotaWait && quotaWait.size === quotaGroups.size) {
    // Every quota descriptor is over: the request fits again once any one of them has room.
    retry = Math.max(retry, Math.min(...quotaWait.values()));
  }
  const decision: Decision = { domain, overLimit: !r.admitted, nowMs: r.nowMs, descriptors: outcomes, retryAfterMs: retry, source: r.source ?? 'store' };
  if (r.expired) decision.expired = r.expired;
  if (r.reservations && outcomes.every(settles)) decision.streamEnd = true;
  return decision;
}

function pushWindow(o: DescriptorOutcome, state: WindowState): void {
  // A first window as a one-element array: a push onto [] would allocate room for 17.
  if (o.windows.length === 0) o.windows = [state];
  else o.windows.push(state);
}

/** A descriptor of a stream-end call: nothing limits it, it settled a reservation, gave back a refund (or
 * asked a rule that takes none), or returned slots. */
function settles(o: DescriptorOutcome): boolean {
  const e = o.reservation?.event;
  return (
    o.windows.length === 0 ||
    e === 'settled' ||
    e === 'late' ||
    e === 'unreserved' ||
    o.refunded !== undefined ||
    o.refundIgnored ||
    o.slots?.event === 'returned'
  );
}

/** An in-flight check's part of its descriptor's outcome: what it did with the slots, and how many leases it
 * found ended. */
function noteSlots(o: DescriptorOutcome, c: CounterCheck, counted: number, over: boolean, expired: number): void {
  if (c.op === 'giveBack') o.slots = { event: 'returned', count: -counted, expired };
  // A refusal is counted once, whatever the hits it asked for (a client's hits_addend is no count of slots).
  else if (over) o.slots = { event: 'refused', count: 1, expired };
  else o.slots = { event: 'taken', count: counted, expired };
}

/** A charge-mode window's part of its descriptor's outcome: what was charged, the debt past the limit, and
 * the reservation's outcome. */
function noteCharge(o: DescriptorOutcome, c: CounterCheck, prev: number, curr: number, counted: number, r: CheckResult): void {
  if (c.op === 'refund') {
    if (c.hits > 0) o.refunded = Math.max(o.refunded ?? 0, -counted);
    return;
  }
  const reservation = r.reservations?.[c.group];
  if (reservation) o.reservation = reservation;
  // What the work cost: a plain charge's hits; a settlement's own hits (what it counted is only the
  // difference to its estimate, which was counted when reserved).
  if (c.hits > 0 && reservation === undefined) o.charged = Math.max(o.charged ?? -Infinity, counted);
  else if (reservation?.event === 'settled' || reservation?.event === 'unreserved') o.charged = c.hits;
  const after = ALGORITHMS[c.kind]!.pastLimit(c, curr, prev, counted, r.nowMs);
  if (after > 0) o.debt = Math.max(o.debt ?? 0, Math.ceil(after));
}

function unlimitedDecision(domain: CompiledDomain | undefined, plans: DescriptorPlan[], nowMs: number): Decision {
  const decision: Decision = {
    domain,
    overLimit: false,
    nowMs,
    descriptors: plans.map(outcomeOf),
    retryAfterMs: 0,
    source: 'none',
  };
  // A stream's end whose refunds its rules do not take checked nothing, but is still a stream's end (when every
  // descriptor of the call is a refund).
  if (plans.some((p) => p.refundIgnored) && plans.every((p) => p.refundIgnored || p.refund)) decision.streamEnd = true;
  return decision;
}

function outcomeOf(p: DescriptorPlan): DescriptorOutcome {
  const unlimited = p.limits.length === 0 && !p.override && (p.rule?.unlimited ?? false);
  return {
    rule: p.rule,
    hits: p.hits,
    tier: p.tier,
    shadow: p.shadow,
    shadowStatus: p.shadowStatus,
    quota: p.quota,
    unlimited,
    over: false,
    windows: [],
    op: undefined,
    refundIgnored: p.refundIgnored === true,
  };
}
