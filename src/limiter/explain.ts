import type { CompiledConfig, CompiledDomain, CompiledLimit } from '../config/compiled.js';
import type { EntryLike, MatchStep } from '../config/match.js';
import { NoConfigError } from '../errors.js';
import { fingerprint } from '../fingerprint.js';
import { givesBack } from '../limits/check.js';
import { ALGORITHMS } from '../limits/kinds/index.js';
import type { Store } from '../store/store.js';
import { peekWindows } from './peek.js';
import { type DecisionInput, type DescriptorPlan, type PlanTrace, type TierSource, toChecks, traceRequest } from './plan.js';

/** Why a request gets the limits it gets: for each descriptor, how each entry matched (exact value, wildcard,
 * the key's default), the rule reached, the tier, the limits and which of them a burst runs into first. Made
 * from the limiter's own plan (plan.ts), so Envoy's per-descriptor limit, `replaces` across descriptors and
 * shadow mode are what a decision would use; this file adds only the words. `tollgate explain` prints it
 * (tuning/report.ts); POST /explain returns it with live counters.
 *
 * An explanation shows only text the config holds: the request's own text (a domain or key the config does
 * not know, any value that is not one of the config's exact values, any token) appears as
 * `fingerprint:<hex>`, with its position and length beside it. A client can put a token anywhere. */

export interface StepExplanation {
  /** The entry's position in its descriptor. */
  entry: number;
  /** The key as the config names it, or its fingerprint when the config does not know it here. */
  key: string;
  /** The value when it is one of the config's exact values, else its fingerprint (always for the token). */
  value: string;
  /** UTF-8 lengths of the key and value as sent. */
  keyBytes: number;
  valueBytes: number;
  /** How it matched; `id`: the last entry names the request (an in_flight request_key) or its reservation,
   * shown by fingerprint: no part of the counter. */
  matched: MatchStep['matched'] | 'id';
  /** When nothing matched: the config's keys at this level and, for a known key, its values (config text). */
  expected?: MatchStep['expected'];
  pattern?: string;
  /** The wildcard has share_threshold: every value it matches shares one counter. */
  shared?: boolean;
  source?: string;
}

export interface LimitExplanation {
  name: string;
  requestsPerUnit: number;
  unit: string;
  /** The limit's own algorithm (it may differ from its rule's). */
  algorithm: string;
  /** token_bucket only: the bucket's capacity. */
  burst?: number;
  /** The window as its key names it (counters/keys.ts windowName): a multiplier, a calendar window. */
  window: string;
  /** Set when another matched limit's `replaces` drops this one. */
  replacedBy?: string;
  /** Live counters (POST /explain on a running service), for the limits that apply. */
  used?: number;
  remaining?: number;
  wouldReject?: boolean;
}

export interface DescriptorExplanation {
  steps: StepExplanation[];
  rule: {
    id: string;
    source: string;
    algorithm: string;
    shadow: boolean;
    quota: boolean;
    unlimited: boolean;
    /** charge_mode, and the entry key that names a reservation (the request's id entry is no part of the counter). */
    charge?: boolean;
    reservationKey?: string;
    /** The entry key that names the reservation at the stream's end (a settlement, never a reservation). */
    settlementKey?: string;
    /** in_flight: the entry key that names the request, and how long a slot nobody gives back is held. */
    requestKey?: string;
    leaseMs?: number;
    /** in_flight with max_hold: how long a slot is renewed while its Envoy stays connected. */
    maxHoldMs?: number;
  } | null;
  /** The request names a reservation on this descriptor's counter (by its id entry, shown by fingerprint). */
  reservation?: boolean;
  /** That entry is the settlement_key: the stream's end settling it. */
  settlement?: boolean;
  /** Why nothing limits this descriptor, when nothing does. */
  reason?: string;
  tier: string | null;
  /** Envoy's per-descriptor limit replaces the config's: it is the one limit listed. */
  override: boolean;
  /** Reported but never rejected: the rule's shadow_mode, or the service's --shadow-mode. */
  shadow: boolean;
  /** Quota mode (the rule's quota_mode, or the service's QUOTA_MODE): rejects only when every quota-mode
   * descriptor of the request is full (or a normal one is). */
  quota: boolean;
  /** Hits each request of this descriptor counts (0: check only). */
  hits: number;
  /** What its checks do (limits/check.ts): check, count, refund, take or giveBack; absent when nothing limits it. */
  op?: string;
  limits: LimitExplanation[];
  /** From empty counters, the window a burst of this descriptor alone fills first. */
  firstToReject: string | null;
}

export interface Explanation {
  /** The configured domain, or the fingerprint of an unknown one. */
  domain: string;
  domainBytes: number;
  known: boolean;
  file?: string;
  /** The service's --shadow-mode: every descriptor is reported, none rejected. */
  shadowMode: boolean;
  descriptors: DescriptorExplanation[];
  /** From empty counters, the window that first stops a burst of this whole request (shadow descriptors
   * never stop it); null when nothing would. */
  firstToReject: { descriptor: number; limit: string } | null;
}

export interface ExplainOptions {
  /** Adds live counters, read without counting. */
  store?: Store;
  /** The service's --shadow-mode. */
  globalShadow?: boolean;
  /** The service's QUOTA_MODE. */
  globalQuota?: boolean;
  /** The service's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false. */
  globalCharge?: boolean;
  xdsCharge?: boolean;
  /** Show the request's own text instead of its fingerprint (not the token's value): for the CLI, where
   * the user typed it. Never for POST /explain, whose request comes from anyone. */
  reveal?: boolean;
}

export async function explain(config: CompiledConfig, tiers: TierSource, request: DecisionInput, opts: ExplainOptions = {}): Promise<Explanation> {
  const domain = config.domains.get(request.domain);
  if (config.pending && !domain) throw new NoConfigError(); // as a decision would (limiter.ts)
  const domainBytes = Buffer.byteLength(request.domain);
  const shadowMode = opts.globalShadow ?? false;
  const { plans, trace } = traceRequest(domain, request, {
    tiers,
    globalShadow: shadowMode,
    globalQuota: opts.globalQuota ?? false,
    globalCharge: opts.globalCharge ?? false,
    xdsCharge: opts.xdsCharge ?? false,
  });
  const hide = opts.reveal ? revealed : hidden;
  if (!domain) {
    const descriptors = plans.map((p, i) => outline(request.descriptors[i]!.entries, [], p, 'no such domain: every request passes', hide));
    return { domain: hide(request.domain), domainBytes, known: false, shadowMode, descriptors, firstToReject: null };
  }
  const descriptors = plans.map((p, i) => describe(domain, request.descriptors[i]!.entries, p, trace, i, hide));
  if (opts.store) await addCounters(descriptors, plans, trace, opts.store);
  return { domain: domain.name, domainBytes, known: true, file: domain.file, shadowMode, descriptors, firstToReject: firstStop(plans) };
}

/** Text the request brought, as an explanation may show it. */
function hidden(text: string): string {
  return `fingerprint:${fingerprint(text)}`;
}

/** The same text as the CLI's user typed it. */
function revealed(text: string): string {
  return JSON.stringify(text);
}

type Hide = (text: string) => string;

function shownStep(j: number, e: EntryLike, key: string, value: string, matched: StepExplanation['matched']): StepExplanation {
  return { entry: j, key, value, keyBytes: Buffer.byteLength(e.key), valueBytes: Buffer.byteLength(e.value), matched };
}

/** A matched key is the config's own text; a value is only when it matched exactly and is not the token
 * (whose value is always a fingerprint: it is the client's identity, and tiers are assigned by it). */
function explainStep(domain: CompiledDomain, j: number, e: EntryLike, s: MatchStep, hide: Hide): StepExplanation {
  const valueText = (v: string): string => (e.key === domain.tokenKey ? hidden(v) : hide(v));
  if (s.matched === 'none')
    return { ...shownStep(j, e, s.knownKey ? e.key : hide(e.key), valueText(e.value), 'none'), ...(s.expected && { expected: s.expected }) };
  const value = s.matched === 'exact' && e.key !== domain.tokenKey ? e.value : valueText(e.value);
  return { ...shownStep(j, e, e.key, value, s.matched), ...(s.pattern && { pattern: s.pattern, shared: s.shared ?? false }), source: s.source };
}

function describe(domain: CompiledDomain, entries: EntryLike[], plan: DescriptorPlan, trace: PlanTrace, i: number, hide: Hide): DescriptorExplanation {
  const match = trace.steps[i]!;
  const steps = match.map((s, j) => explainStep(domain, j, entries[j]!, s, hide));
  const r = plan.rule;
  const out = outline(
    entries,
    steps,
    plan,
    plan.limits.length === 0 ? whyUnlimited(match, steps, plan, trace.configured[i]!) : undefined,
    hide,
    domain.tokenKey,
  );
  out.rule = r
    ? {
        id: r.id,
        source: r.source,
        // An in_flight rule's kind is its limit's, whatever the domain's algorithm.
        algorithm: r.inFlight ? r.limits[0]!.algorithm : r.algorithm,
        shadow: r.shadow,
        quota: r.quota,
        unlimited: r.unlimited,
        ...(plan.charge && { charge: true }),
        ...(r.reservationKey !== undefined && { reservationKey: r.reservationKey }),
        ...(r.settlementKey !== undefined && { settlementKey: r.settlementKey }),
        ...(r.inFlight && {
          leaseMs: r.inFlight.leaseMs,
          ...(r.inFlight.maxHoldMs !== undefined && { maxHoldMs: r.inFlight.maxHoldMs }),
          ...(r.inFlight.requestKey !== undefined && { requestKey: r.inFlight.requestKey }),
        }),
      }
    : null;
  const check = toChecks([plan])[0];
  if (check) out.op = check.op;
  if (plan.reservation) out.reservation = true;
  if (plan.reservation?.settles) out.settlement = true;
  out.limits = trace.configured[i]!.map((l) => {
    const by = trace.replacedBy.get(l.name);
    return {
      name: l.name,
      requestsPerUnit: l.requestsPerUnit,
      unit: l.unit,
      algorithm: l.algorithm,
      ...ALGORITHMS[l.kind]!.shown(l),
      window: l.windowName,
      ...(by && { replacedBy: by }),
    };
  });
  // What gives back never rejects.
  out.firstToReject = check && givesBack(check) ? null : (firstFull(plan)?.limit.name ?? null);
  return out;
}

/** A descriptor's explanation without its rule and limits: `steps` for the entries the config was consulted
 * for, the rest shown by fingerprint only. */
function outline(
  entries: EntryLike[],
  steps: StepExplanation[],
  plan: DescriptorPlan,
  reason: string | undefined,
  hide: Hide,
  tokenKey?: string,
): DescriptorExplanation {
  // The last entry names the request or its reservation when the plan holds one: shown by fingerprint.
  const named = plan.slotId !== undefined || plan.reservation !== undefined ? entries.length - 1 : -1;
  const rest = entries
    .slice(steps.length)
    .map((e, k) =>
      steps.length + k === named
        ? shownStep(named, e, e.key, hidden(e.value), 'id')
        : shownStep(steps.length + k, e, hide(e.key), e.key === tokenKey ? hidden(e.value) : hide(e.value), 'none'),
    );
  return {
    steps: [...steps, ...rest],
    rule: null,
    ...(reason !== undefined && { reason }),
    tier: plan.tier ?? null,
    override: plan.override,
    shadow: plan.shadow,
    quota: plan.quota,
    hits: plan.hits,
    limits: [],
    firstToReject: null,
  };
}

/** Why nothing limits a descriptor. */
function whyUnlimited(match: MatchStep[], shown: StepExplanation[], plan: DescriptorPlan, configured: readonly CompiledLimit[]): string {
  const j = match.length - 1;
  const last = match[j];
  if (last?.matched === 'none') {
    const { key, value } = shown[j]!;
    const why = !last.level
      ? `entry ${j}: the config has no deeper level`
      : last.knownKey
        ? `no descriptor matches ${key}=${value} (no exact value, wildcard or default key)`
        : `entry ${j}: no descriptor for its key (${key}) at this level`;
    return `${why}: nothing limits this descriptor`;
  }
  if (!plan.rule) return 'the descriptor matches, but its last node sets no limits';
  if (plan.refundIgnored) return 'a refund (is_negative_hits) on a rule with refunds: false: nothing is checked or given back';
  if (plan.rule.unlimited) return 'the rule is unlimited';
  if (configured.length === 0) return `the rule sets no limits for ${plan.tier !== undefined ? `tier ${plan.tier}` : 'clients without a tier'}`;
  return 'every limit of this descriptor is replaced by another matched limit (see replacedBy)';
}

/** Requests a window admits from empty before it is full, when each counts `hits`: a check-only request
 * (hits 0) counts nothing, so it fills no window (but finds a limit of 0 full). Fixed and sliding windows
 * agree here, as a burst has no previous window; a token bucket starts full and admits its burst (a burst
 * is taken at once, before any refill). */
function allowance(limit: CompiledLimit, hits: number): number {
  const capacity = ALGORITHMS[limit.kind]!.capacity(limit);
  if (hits > 0) return Math.floor(capacity / hits);
  return capacity >= 1 ? Infinity : 0;
}

/** A window in a burst: how many requests it admits, and its length (the shorter fills first on a tie). */
interface Filling {
  limit: CompiledLimit;
  allowance: number;
  descriptor: number;
}

function fillsFirst(a: Filling, b: Filling | undefined): boolean {
  return !b || a.allowance < b.allowance || (a.allowance === b.allowance && a.limit.windowSeconds < b.limit.windowSeconds);
}

/** The window of a plan a burst fills first, if any ever fills. */
function firstFull(plan: DescriptorPlan, descriptor = 0): Filling | undefined {
  let first: Filling | undefined;
  for (const limit of plan.limits) {
    const f = { limit, allowance: allowance(limit, plan.hits), descriptor };
    if (f.allowance !== Infinity && fillsFirst(f, first)) first = f;
  }
  return first;
}

/** The window that first stops a burst of the whole request. Until then every request is admitted, so every
 * descriptor counts its hits each time (until it is full): the window with the smallest allowance stops it
 * (the shorter window, then the earlier descriptor, on a tie). Shadow descriptors never stop a request;
 * quota-mode ones stop it together, once the last of them is full. */
function firstStop(plans: readonly DescriptorPlan[]): Explanation['firstToReject'] {
  let first: Filling | undefined;
  let lastQuota: Filling | undefined;
  let quotaAllFill = true;
  plans.forEach((p, i) => {
    if (p.quotaPasses) quotaAllFill = false; // a quota-mode descriptor that always passes: quota never blocks
    if (p.shadow) return;
    const f = firstFull(p, i);
    if (!p.quota) {
      if (f && fillsFirst(f, first)) first = f;
    } else if (!f) quotaAllFill = false;
    else if (!lastQuota || !fillsFirst(f, lastQuota)) lastQuota = f;
  });
  if (quotaAllFill && lastQuota && fillsFirst(lastQuota, first)) first = lastQuota;
  const stop = first as Filling | undefined;
  return stop ? { descriptor: stop.descriptor, limit: stop.limit.name } : null;
}

/** Live counts of the limits that apply, read with check-only calls (nothing is counted). */
async function addCounters(out: DescriptorExplanation[], plans: readonly DescriptorPlan[], trace: PlanTrace, store: Store): Promise<void> {
  const use = await peekWindows(store, plans);
  plans.forEach((p, i) => {
    p.limits.forEach((l, j) => {
      const shown = out[i]!.limits[trace.configured[i]!.indexOf(l)]!;
      shown.used = use[i]![j]!.used;
      shown.remaining = use[i]![j]!.remaining;
      shown.wouldReject = use[i]![j]!.full;
    });
  });
}
