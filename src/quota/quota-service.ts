import type { CompiledConfig } from '../config/compiled.js';
import type { TierSource } from '../limiter/plan.js';
import type { DemandEntry, DemandStore } from '../store/demand-store.js';
import type { CheckResult, CounterCheck, Store } from '../store/store.js';
import { type BucketPlan, planBucket } from './bucket-plan.js';
import { fairShares, plannedDemand } from './fair-share.js';
import { fleetCapacity } from './fleet-capacity.js';
import { bucketFor, DENY, type Strategy } from './strategy.js';

/** RLQS assignments from global state: for one usage report of one Envoy instance, its demand per bucket goes
 * into the shared demand table, the requests it allowed into the same window counters RLS decisions use, and
 * each bucket gets a token bucket whose rate is this instance's max-min fair share of what the bucket's limits
 * let the whole fleet admit (fair-share.ts, fleet-capacity.ts). Every replica computes from the same table, so
 * the shares of all instances reporting a bucket sum to no more than its limit. */

export interface QuotaSettings {
  /** How often Envoy reports (5 s, hard-coded in Envoy today): demand entries and assignments live a few. */
  reportIntervalMs: number;
  unmatched: 'allow' | 'deny';
  globalShadow: boolean;
}

export interface QuotaDeps {
  config: () => CompiledConfig;
  tiers: TierSource;
  /** The counter store (for long windows). */
  store: Store;
  demands: DemandStore;
  settings: QuotaSettings;
}

/** One bucket of one report, as the stream saw it. */
export interface BucketUsage {
  plan: BucketPlan;
  allowed: number;
  /** Requests a second this instance offered the bucket (allowed + denied over the interval); Infinity when
   * not known yet (the bucket's first report). */
  demand: number;
}

/** Demand entries outlive three report intervals: a report lost or late does not release a share, an instance
 * gone releases it in at most this long. Assignments live as long, and are re-sent with every report. */
export const LIVES_FOR_REPORTS = 3;

export class QuotaService {
  constructor(private readonly deps: QuotaDeps) {}

  get settings(): QuotaSettings {
    return this.deps.settings;
  }

  /** Assignment time to live, in whole seconds (Envoy reads only the seconds; under 1 s it expires at once). */
  get ttlSeconds(): number {
    return Math.max(1, Math.ceil((this.deps.settings.reportIntervalMs * LIVES_FOR_REPORTS) / 1000));
  }

  /** The plan of a bucket under the current config (again when the config changed since `known`). */
  plan(domain: string, bucket: Readonly<Record<string, string>>, known?: BucketPlan): BucketPlan {
    const config = this.deps.config();
    if (known && known.config === config) return known;
    const { tiers, settings } = this.deps;
    return planBucket(config, domain, bucket, { tiers, ...settings });
  }

  /** The strategy of every bucket of one report, in order. Throws when the store cannot answer: the stream then
   * sends nothing, and Envoy keeps its assignments until their TTL. */
  async assign(instance: string, usages: readonly BucketUsage[]): Promise<Strategy[]> {
    const limited = usages.filter((u) => !u.plan.fixed);
    const ttlMs = this.ttlSeconds * 1000;
    const [tables, counts] = await Promise.all([
      limited.length === 0
        ? []
        : this.deps.demands.exchange(
            limited.map((u) => ({ key: u.plan.shareKey, instance, demand: u.demand, ttlMs })),
            Date.now(),
          ),
      this.countQuotas(limited),
    ]);
    const horizonMs = this.deps.settings.reportIntervalMs;
    let t = 0;
    let from = 0;
    return usages.map((u) => {
      if (u.plan.fixed) return u.plan.fixed;
      const capacity = fleetCapacity(u.plan, counts, from, u.allowed, horizonMs);
      from += u.plan.quotas.length;
      const table = tables[t++]!;
      if (capacity.spent) return DENY;
      const share = shareOf(instance, capacity.ratePerSecond, table);
      // A bucket carries its share of unspent tokens into the next assignment (a first one starts full): its burst
      // is held to a quarter of this instance's part of what is left, the most a long window can be exceeded by.
      return bucketFor(share, Math.max(1, Math.floor((capacity.left * share) / capacity.ratePerSecond / 4)));
    });
  }

  /** Counts the allowed requests of every long window of the report, in one store call. */
  private countQuotas(limited: readonly BucketUsage[]): Promise<CheckResult | undefined> {
    const checks: CounterCheck[] = [];
    for (const u of limited) for (const q of u.plan.quotas) checks.push({ ...q.check, hits: u.allowed });
    return checks.length === 0 ? Promise.resolve(undefined) : Promise.resolve(this.deps.store.check(checks));
  }
}

/** This instance's share of the fleet's rate among the live entries of the bucket's table. */
export function shareOf(instance: string, capacity: number, table: readonly DemandEntry[]): number {
  if (capacity === Infinity) return Infinity;
  let me = table.findIndex((e) => e.instance === instance);
  const demands = table.map((e) => plannedDemand(e.demand));
  if (me < 0) me = demands.push(Infinity) - 1; // dropped from a full table: still owed a share
  return fairShares(capacity, demands)[me]!;
}
