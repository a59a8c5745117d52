import type { CompiledConfig, CompiledDomain, CompiledLimit, KeyBranch, MatchNode, Rule } from '../config/compiled.js';
import { matchKind, step, type EntryLike, type MatchKind } from '../config/match.js';
import type { TierSource } from '../control/tier-store.js';
import { cachedFingerprint } from '../fingerprint.js';
import { counterKey } from '../limiter/limiter.js';
import { limitsFor, peekWindows } from '../limiter/peek.js';
import type { Store } from '../store/store.js';

/** Why a request gets the limits it gets: for each descriptor, how each entry matched (exact value, wildcard,
 * the key's default), the rule reached, the tier, the limits and which of them a request would hit. */

export interface StepExplanation {
  key: string;
  /** The value as shown: a token entry appears as its fingerprint. */
  value: string;
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
  domain: string;
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
  if (!domain) {
    return { domain: domainName, known: false, descriptors: descriptors.map((entries) => unmatched(entries, 'no such domain: every request passes')) };
  }
  const works = descriptors.map((entries) => explainOne(domain, tiers, entries));
  markReplaced(works);
  if (store) await addCounters(works, store);
  return { domain: domainName, known: true, file: domain.file, descriptors: works.map((w) => w.out) };
}

function explainOne(domain: CompiledDomain, tiers: TierSource, entries: EntryLike[]): Work {
  const steps: StepExplanation[] = [];
  let level: ReadonlyMap<string, KeyBranch> | undefined = domain.root;
  let node: MatchNode | undefined;
  for (const e of entries) {
    const shown = e.key === domain.tokenKey ? `fingerprint:${cachedFingerprint(e.value)}` : e.value;
    const branch: KeyBranch | undefined = level?.get(e.key);
    node = branch && step(branch, e.value);
    if (!branch || !node) {
      steps.push({ key: e.key, value: shown, matched: 'none' });
      const why = !level
        ? 'the config has no deeper level'
        : branch
          ? `no descriptor matches ${e.key}=${shown} (no exact value, wildcard or default key)`
          : `no descriptor for key "${e.key}" at this level`;
      return { out: { ...unmatched(entries, `${why}: nothing limits this descriptor`), steps }, entries, limits: [] };
    }
    const how = matchKind(branch, node, e.value);
    steps.push({ key: e.key, value: shown, matched: how.kind, ...(how.pattern && { pattern: how.pattern }), source: node.source });
    level = node.children;
  }
  const rule = node?.rule;
  if (!rule) return { out: { ...unmatched(entries, 'the descriptor matches, but its last node sets no limits'), steps }, entries, limits: [] };
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

function unmatched(entries: EntryLike[], reason: string): DescriptorExplanation {
  return { steps: entries.map((e) => ({ key: e.key, value: e.value, matched: 'none' as const })), rule: null, reason, tier: null, limits: [], firstToReject: null };
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
