import type { CompiledConfig, CompiledLimit, Rule } from '../../config/compiled.js';
import type { EntryLike } from '../../config/match.js';
import { demandKey } from '../../counters/keys.js';
import { planRequest, type TierSource, toChecks } from '../../limiter/plan.js';
import type { CounterCheck } from '../../limits/check.js';
import { ALGORITHMS, PREVIOUS_READER } from '../../limits/kinds/index.js';
import { bucketEntries } from './bucket-descriptor.js';
import { ALLOW, DENY, type Strategy } from './strategy.js';

/** What an RLQS bucket is held to, planned once per bucket and stream (again after a config reload), through
 * the same planner as an RLS decision: the descriptor its map becomes (bucket-descriptor.ts), its rule, the
 * client's tier, the limits after `replaces`, and its counters. */
export interface BucketPlan {
  config: CompiledConfig;
  entries: EntryLike[];
  rule: Rule | undefined;
  tier: string | undefined;
  /** Set when no counter decides: an unlimited or shadow rule (ALLOW_ALL), or no rule (RLQS_UNMATCHED). */
  fixed: Strategy | undefined;
  /** The bucket's demand table (counters/keys.ts demandKey): the same for every instance and replica. */
  shareKey: string;
  /** Windows no longer than a report interval, and token buckets: each bounds the fleet's rate directly. */
  rates: CompiledLimit[];
  /** The windows among `rates` (not the token buckets): what RLS decisions admitted on each is read at every
   * report (`check` reads the window and the one before, counting nothing) and left to RLS. */
  rlsWindows: { limit: CompiledLimit; check: CounterCheck }[];
  /** Longer windows: a quota the fleet spends, counted on the same counters RLS decisions use, from the
   * requests Envoy reports it allowed. `check` is the window's store call; its hits are set per report. */
  quotas: { limit: CompiledLimit; check: CounterCheck }[];
}

export interface BucketPlanOptions {
  tiers: TierSource;
  reportIntervalMs: number;
  /** What a bucket no rule matches gets. */
  unmatched: 'allow' | 'deny';
  globalShadow: boolean;
}

/** A limit no report can pass: a quota window is counted but never refused, since Envoy already admitted
 * what it reports. */
const NEVER_OVER = Number.MAX_SAFE_INTEGER;

export function planBucket(config: CompiledConfig, domainName: string, bucket: Readonly<Record<string, string>>, o: BucketPlanOptions): BucketPlan {
  const domain = config.domains.get(domainName);
  const entries = bucketEntries(domain, bucket);
  const [plan] = planRequest(domain, { descriptors: [{ entries }], hits: 0 }, { tiers: o.tiers, globalShadow: o.globalShadow });
  const p = plan!;
  const base = { config, entries, rule: p.rule, tier: p.tier, shareKey: '', rates: [], rlsWindows: [], quotas: [] };
  if (!p.rule && p.limits.length === 0) return { ...base, fixed: o.unmatched === 'deny' ? DENY : ALLOW };
  // An in-flight limit counts requests until they end, which RLQS never hears of (reports count arrivals):
  // RLQS cannot hold it, and leaves it to RLS (docs/in-flight.md).
  if (p.limits.length === 0 || p.shadow || p.limits.every((l) => ALGORITHMS[l.kind]!.slots)) return { ...base, fixed: ALLOW };
  const checks = toChecks([p]);
  const rates: CompiledLimit[] = [];
  const rlsWindows: BucketPlan['rlsWindows'] = [];
  const quotas: BucketPlan['quotas'] = [];
  p.limits.forEach((limit, i) => {
    const kind = ALGORITHMS[limit.kind]!;
    if (kind.slots) return;
    const check = { ...checks[i]!, limit: NEVER_OVER, group: 0, shadow: false, quota: false, charge: false, reservation: undefined };
    if (kind.refills || limit.windowSeconds * 1000 <= o.reportIntervalMs) rates.push(limit);
    // What Envoy admitted is counted as it is: no charge rule, no reservation, applies to it.
    else quotas.push({ limit, check });
    // Read as a sliding window: the previous window's count comes back too (the counter names are the same).
    if (!kind.refills && limit.windowSeconds * 1000 <= o.reportIntervalMs) rlsWindows.push({ limit, check: { ...check, hits: 0, kind: PREVIOUS_READER } });
  });
  return { ...base, fixed: undefined, shareKey: demandKey(p.key), rates, rlsWindows, quotas };
}
