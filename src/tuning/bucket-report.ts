import type { CompiledLimit } from '../config/compiled.js';
import type { EntryLike } from '../config/match.js';
import type { BucketPlan } from '../rlqs/quota/bucket-plan.js';

/** `tollgate explain --bucket`: how an RLQS BucketId becomes a descriptor, and what its assignments are made
 * from. The explanation of the descriptor itself follows (report.ts formatExplanation). */

export interface BucketExplanation {
  descriptor: EntryLike[];
  /** ALLOW_ALL or DENY_ALL when no counter decides; undefined when assignments are shares of the limits. */
  fixed: 'ALLOW_ALL' | 'DENY_ALL' | undefined;
  /** Windows that bound the fleet's rate directly (their limit over their length). */
  rates: string[];
  /** Those of them shared with RLS decisions: what RLS admitted on them is left to RLS. */
  rlsRoom: string[];
  /** Windows given out as a quota over each report interval, counted on RLS's counters; spent, DENY_ALL. */
  quotas: string[];
}

/** `shown`: an entry as it may be printed (the token's value as its fingerprint). */
export function bucketExplanation(plan: BucketPlan, shown: (e: EntryLike) => EntryLike): BucketExplanation {
  const name = (l: CompiledLimit): string => `${l.name} (${l.requestsPerUnit}/${l.unit})`;
  return {
    descriptor: plan.entries.map(shown),
    fixed: plan.fixed && (plan.fixed.kind === 'deny' ? 'DENY_ALL' : 'ALLOW_ALL'),
    rates: plan.rates.map(name),
    rlsRoom: plan.rlsWindows.map((w) => w.limit.name),
    quotas: plan.quotas.map((q) => name(q.limit)),
  };
}

export function formatBucket(b: BucketExplanation): string {
  const lines = [`RLQS bucket → descriptor [${b.descriptor.map((e) => `${e.key}=${e.value}`).join(', ')}] (entry order taken from the config)`];
  if (b.fixed) {
    const why = b.fixed === 'DENY_ALL' ? 'no rule matches it (RLQS_UNMATCHED=deny)' : 'no counter decides it (no rule, an unlimited or a shadow rule)';
    lines.push(`  every Envoy instance gets ${b.fixed}: ${why}`);
  } else {
    lines.push('  each Envoy instance reporting it gets a token bucket: its max-min fair share of what the fleet may admit,');
    if (b.rates.length > 0) lines.push(`  at most the rate of ${b.rates.join(', ')}`);
    if (b.rlsRoom.length > 0) lines.push(`  less what RLS decisions admitted on ${b.rlsRoom.join(', ')} over its last window (RLS keeps its room)`);
    if (b.quotas.length > 0) lines.push(`  and what is left of ${b.quotas.join(', ')} over the next report interval; spent: DENY_ALL until it turns`);
  }
  return `${lines.join('\n')}\n\n`;
}
