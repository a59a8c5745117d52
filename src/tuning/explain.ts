import type { CompiledConfig, CompiledDomain, CompiledLimit, KeyBranch, MatchNode, Rule } from '../config/compiled.js';
import { matchKind, step, type EntryLike, type MatchKind } from '../config/match.js';
import type { TierSource } from '../control/tier-store.js';
import { cachedFingerprint, fingerprint } from '../fingerprint.js';
import { counterKey } from '../limiter/limiter.js';
import { limitsFor, peekWindows } from '../limiter/peek.js';
import type { Store } from '../store/store.js';

/** Why a request gets the limits it gets: for each descriptor, how each entry matched (exact value, wildcard,
 * the key's default), the rule reached, the tier, the limits and which of them a request would hit.
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
  matched: MatchKind | 'none';
  pattern?: string;
  source?: string;
}

export interface LimitExplanation {
  name: string;
  requestsPerUnit: number;
  unit: string;
  /** Set when another matched limit's `replaces` drops this one. */
  replacedBy?: string;
  /** Live counters (POST /explain on a running service). */
  used?: number;
  remaining?: number;
  wouldReject?: boolean;
}

export interface DescriptorExplanation {
  steps: StepExplanation[];
  rule: { id: string; source: string; algorithm: string; shadow: boolean; unlimited: boolean } | null;
  /** Why nothing limits this descriptor, when nothing does. */
  reason?: string;
  tier: string | null;
  limits: LimitExplanation[];
  /** From empty counters, the window a burst runs into first. */
  firstToReject: string | null;
}

export interface Explanation {
  /** The configured domain, or the fingerprint of an unknown one. */
  domain: string;
  domainBytes: number;
  known: boolean;
  file?: string;
  descriptors: DescriptorExplanation[];
}

/** A descriptor being explained, with the compiled rule and limits the explanation was made from. */
interface Work {
  out: DescriptorExplanation;
  entries: EntryLike[];
  rule?: Rule;
  limits: readonly CompiledLimit[];
}

export async function explain(
  config: CompiledConfig, tiers: TierSource, domainName: string, descriptors: EntryLike[][], store?: Store,
): Promise<Explanation> {
  const domain = config.domains.get(domainName);
  const domainBytes = Buffer.byteLength(domainName);
  if (!domain) {
    const why = 'no such domain: every request passes';
    return { domain: hidden(domainName), domainBytes, known: false, descriptors: descriptors.map((entries) => unmatched(entries, 0, [], why)) };
  }
  const works = descriptors.map((entries) => explainOne(domain, tiers, entries));
  markReplaced(works);
  if (store) await addCounters(works, store);
  return { domain: domain.name, domainBytes, known: true, file: domain.file, descriptors: works.map((w) => w.out) };
}

/** Text the request brought, as an explanation may show it. */
function hidden(text: string): string {
  return `fingerprint:${fingerprint(text)}`;
}

function shownStep(j: number, e: EntryLike, key: string, value: string, matched: StepExplanation['matched']): StepExplanation {
  return { entry: j, key, value, keyBytes: Buffer.byteLength(e.key), valueBytes: Buffer.byteLength(e.value), matched };
}

function explainOne(domain: CompiledDomain, tiers: TierSource, entries: EntryLike[]): Work {
  const steps: StepExplanation[] = [];
  let level: ReadonlyMap<string, KeyBranch> | undefined = domain.root;
  let node: MatchNode | undefined;
  for (const [j, e] of entries.entries()) {
    const branch: KeyBranch | undefined = level?.get(e.key);
    node = branch && step(branch, e.value);
    if (!branch || !node) {
      // A key found at this level is the config's own text; the value did not match, so it is not.
      const key = branch ? e.key : hidden(e.key);
      const why = !level
        ? `entry ${j}: the config has no deeper level`
        : branch
          ? `no descriptor matches ${key}=${hidden(e.value)} (no exact value, wildcard or default key)`
          : `entry ${j}: no descriptor for its key (${key}) at this level`;
      const out = unmatched(entries, j + 1, [...steps, shownStep(j, e, key, hidden(e.value), 'none')], `${why}: nothing limits this descriptor`);
      return { out, entries, limits: [] };
    }
    const how = matchKind(branch, node, e.value);
    const value = how.kind === 'exact' && e.key !== domain.tokenKey ? e.value : hidden(e.value);
    steps.push({ ...shownStep(j, e, e.key, value, how.kind), ...(how.pattern && { pattern: how.pattern }), source: node.source });
    level = node.children;
  }
  const rule = node?.rule;
  if (!rule) return { out: unmatched(entries, entries.length, steps, 'the descriptor matches, but its last node sets no limits'), entries, limits: [] };
  const token = entries.find((e) => e.key === domain.tokenKey);
  const tier = token && rule.tierLimits.size > 0 ? (tiers.tierOf(cachedFingerprint(token.value)) ?? null) : null;
  const limits = rule.unlimited ? [] : limitsFor(rule, tier);
  const out: DescriptorExplanation = {
    steps,
    rule: { id: rule.id, source: rule.source, algorithm: rule.algorithm, shadow: rule.shadow, unlimited: rule.unlimited },
    ...(rule.unlimited && { reason: 'the rule is unlimited' }),
    tier,
    limits: limits.map((l) => ({ name: l.name, requestsPerUnit: l.requestsPerUnit, unit: l.unit })),
    firstToReject: firstToReject(limits),
  };
  return { out, entries, rule, limits };
}

/** A descriptor nothing limits: `steps` for the entries explained so far, the rest (from `from`) unmatched
 * and shown by fingerprint only, as the config was not consulted for them. */
function unmatched(entries: EntryLike[], from: number, steps: StepExplanation[], reason: string): DescriptorExplanation {
  const rest = entries.slice(from).map((e, i) => shownStep(from + i, e, hidden(e.key), hidden(e.value), 'none'));
  return { steps: [...steps, ...rest], rule: null, reason, tier: null, limits: [], firstToReject: null };
}

/** A burst from empty counters is stopped first by the smallest allowance (the shorter window on a tie). */
function firstToReject(limits: readonly CompiledLimit[]): string | null {
  const sorted = [...limits].sort((a, b) => a.requestsPerUnit - b.requestsPerUnit || a.windowSeconds - b.windowSeconds);
  return sorted[0]?.name ?? null;
}

/** As the limiter does: a limit named in another matched limit's `replaces` does not apply. */
function markReplaced(works: Work[]): void {
  const replacedBy = new Map<string, string>();
  for (const w of works) for (const l of w.limits) for (const name of l.replaces) replacedBy.set(name, l.name);
  for (const w of works) {
    for (const l of w.out.limits) {
      const by = replacedBy.get(l.name);
      if (by) l.replacedBy = by;
    }
  }
}

/** Live counts, read with check-only calls (nothing is counted). */
async function addCounters(works: Work[], store: Store): Promise<void> {
  const targets: { out: LimitExplanation; key: string; limit: CompiledLimit; sliding: boolean }[] = [];
  for (const w of works) {
    if (!w.rule) continue;
    const key = counterKey(w.rule.counterId, w.rule.variable, w.entries);
    const sliding = w.rule.algorithm === 'sliding_window';
    w.limits.forEach((limit, i) => targets.push({ out: w.out.limits[i]!, key, limit, sliding }));
  }
  const use = await peekWindows(store, targets);
  targets.forEach((t, i) => {
    t.out.used = use[i]!.used;
    t.out.remaining = use[i]!.remaining;
    t.out.wouldReject = use[i]!.full;
  });
}
