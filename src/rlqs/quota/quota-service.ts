import type { CompiledConfig } from '../../config/compiled.js';
import { fairShares, plannedDemand } from '../../counters/fair-share.js';
import { StoreUnavailableError } from '../../errors.js';
import type { TierSource } from '../../limiter/plan.js';
import type { CheckResult, CounterCheck } from '../../limits/check.js';
import type { Store } from '../../store/store.js';
import type { ShareEvents } from '../shares/share-events.js';
import { type ShareGrant, type ShareStore, WORTH_TELLING } from '../shares/share-store.js';
import { type BucketPlan, planBucket } from './bucket-plan.js';
import { type FleetCapacity, fleetCapacity } from './fleet-capacity.js';
import { bucketFor, DENY, type Strategy } from './strategy.js';

/** RLQS assignments from global state. For one usage report of one Envoy instance: the requests it allowed go
 * into the same window counters RLS decisions use (a long window's quota), what the fleet may admit follows
 * from the bucket's limits (fleet-capacity.ts), and the instance's grant is reserved in the bucket's shared
 * table: its fair share under the table's plan, but never more than the other instances' grants leave of the
 * limit and its headroom pool (counters/fair-share.ts grantUnder). When an instance is held below its fair share,
 * the replicas are told (ShareEvents, once per report interval per bucket) and re-assign their own instances of
 * that bucket, and its own replica re-assigns it a few times as room frees, so the fleet converges in a few round
 * trips rather than report intervals. */

export interface QuotaSettings {
  /** How often Envoy reports (5 s, hard-coded in Envoy today): assignments live a few. */
  reportIntervalMs: number;
  unmatched: 'allow' | 'deny';
  globalShadow: boolean;
}

export interface QuotaDeps {
  config: () => CompiledConfig;
  tiers: TierSource;
  /** The counter store (long windows, and what RLS admitted on short ones), without the failure policy. */
  store: Store;
  shares: ShareStore;
  events: ShareEvents;
  settings: QuotaSettings;
  /** Share keys whose retries are counted at once (MAX_RETRYING; smaller in tests). */
  maxRetrying?: number;
}

/** One bucket of one report, as the stream saw it. */
export interface BucketUsage {
  plan: BucketPlan;
  allowed: number;
  /** Requests a second this instance offered the bucket (allowed + denied over the interval); Infinity when
   * not known yet (the bucket's first report). */
  demand: number;
  /** The rate its Envoy runs for the bucket now (what it was last sent; 0 before anything). */
  running: number;
}

/** A report's answer: per usage, in order, its strategy, or undefined where the store could not answer (its
 * Envoy keeps what it has until its TTL); and why, the first such failure. */
export interface Assignment {
  strategies: (Strategy | undefined)[];
  failure: StoreUnavailableError | undefined;
}

/** Assignments live three report intervals: a report lost or late does not end one. */
export const LIVES_FOR_REPORTS = 3;
/** Re-assignments a change calls for wait this long, so a burst of changes to one bucket costs one round. */
const SETTLE_MS = 50;
/** A bucket held below its fair share is re-assigned on this replica this many times in one report interval at
 * most (the replicas are told once per interval, quota-share.lua's `tell`): room the others free as they shrink
 * reaches it in a few round trips, not at its next report. */
const RETRIES_PER_INTERVAL = 4;
/** Between two of those re-assignments. */
const RETRY_MS = 100;

export class QuotaService {
  private readonly watchers = new Map<string, Set<(key: string) => void>>();
  private readonly settling = new Map<string, NodeJS.Timeout>();
  /** Per share key held back on this replica: re-assignments since `since`. */
  private readonly retries = new Map<string, { since: number; n: number }>();
  private listening = false;

  constructor(private readonly deps: QuotaDeps) {}

  /** Assignment time to live, in whole seconds (Envoy reads only the seconds; under 1 s it expires at once). */
  get ttlSeconds(): number {
    return Math.max(1, Math.ceil((this.deps.settings.reportIntervalMs * LIVES_FOR_REPORTS) / 1000));
  }

  /** The plan of a bucket now: planned afresh at every report, so a reload and a client's tier changed through the
   * admin API reach held buckets as they reach RLS decisions (a few µs a bucket, every few seconds). */
  plan(domain: string, bucket: Readonly<Record<string, string>>): BucketPlan {
    const { tiers, settings, config } = this.deps;
    return planBucket(config(), domain, bucket, { tiers, ...settings });
  }

  /** Why a report would get no answer now (the share table's store is known down, or has all it may wait
   * for): the caller then leaves the report unread, instead of planning its buckets for nothing. */
  unavailable(): StoreUnavailableError | undefined {
    return this.deps.shares.unavailable();
  }

  /** Calls `listener` when the shares of the bucket `key` moved; returns how to stop. */
  watch(key: string, listener: (key: string) => void): () => void {
    // The events are listened to from the first stream on: a service nobody asks for RLQS holds no subscription.
    if (!this.listening) {
      this.listening = true;
      this.deps.events.onChange((k) => this.changed(k));
    }
    const set = this.watchers.get(key) ?? new Set();
    this.watchers.set(key, set);
    set.add(listener);
    return () => {
      set.delete(listener);
      if (set.size === 0 && this.watchers.get(key) === set) this.watchers.delete(key);
    };
  }

  /** The strategy of every bucket, in order. `pushed`: a re-assignment between reports (nothing new counted). A
   * bucket whose counters or share the store could not answer gets none, whatever its windows, and the answer
   * says why; anything else thrown (a bug) is thrown. */
  async assign(instance: string, usages: readonly BucketUsage[], pushed = false): Promise<Assignment> {
    const limited = usages.filter((u) => !u.plan.fixed);
    const counted = await Promise.allSettled(limited.map((u) => this.countWindows(u, pushed)));
    const { groups, spent, failure } = grouped(limited, counted, pushed, this.deps.settings.reportIntervalMs);
    const shared = await this.share(instance, groups);
    return {
      strategies: usages.map((u) => u.plan.fixed ?? (spent.has(u) ? DENY : shared.granted.get(u))),
      failure: failure ?? shared.failure,
    };
  }

  /** Each group's grant from the share table, split among its buckets. */
  private async share(instance: string, groups: Groups): Promise<{ granted: Map<BucketUsage, Strategy>; failure?: StoreUnavailableError }> {
    const granted = new Map<BucketUsage, Strategy>();
    if (groups.size === 0) return { granted };
    const asks = [...groups.entries()];
    const ttlMs = (this.ttlSeconds + this.deps.settings.reportIntervalMs / 1000) * 1000; // outlives the assignment
    const requests = asks.map(([key, { c, members }]) => ({
      key,
      instance,
      demand: groupDemand(members),
      intervalMs: this.deps.settings.reportIntervalMs,
      capacity: c.ratePerSecond,
      ttlMs,
      running: Math.min(
        c.ratePerSecond,
        members.reduce((sum, u) => sum + u.running, 0),
      ), // ALLOW_ALL counts as all of it
      rebuildMs: this.ttlSeconds * 1000, // a lost grant has ended, or been reported again, within its TTL
    }));
    const grants = await this.deps.shares.reserve(requests, Date.now());
    let failure: StoreUnavailableError | undefined;
    asks.forEach(([key, { c, members }], i) => {
      const g = grants[i]!;
      if (g instanceof StoreUnavailableError) {
        failure ??= g;
        return;
      }
      this.tell(key, c, g);
      const split = fairShares(
        g.rate,
        members.map((u) => plannedDemand(u.demand)),
      );
      members.forEach((u, j) => {
        granted.set(u, strategyOf(c, split[j]!, this.deps.settings.reportIntervalMs));
      });
    });
    return { granted, failure };
  }

  /** A grant held below its fair share needs others to shrink: the replicas are told when the table says so (once
   * per interval per bucket), and this replica re-assigns the bucket a few times as room frees. */
  private tell(key: string, c: FleetCapacity, g: ShareGrant): void {
    if (g.tell) this.deps.events.publish(key);
    if (g.rate < g.fair - c.ratePerSecond * WORTH_TELLING) this.retry(key);
  }

  /** A held-back bucket re-assigned on this replica after RETRY_MS, RETRIES_PER_INTERVAL times an interval. */
  private retry(key: string): void {
    const now = Date.now();
    const interval = this.deps.settings.reportIntervalMs;
    let r = this.retries.get(key);
    if (!r || now - r.since >= interval) {
      // Renewed keys are re-inserted, so the map's order is their `since`: the ones an interval old go from the front.
      for (const [k, old] of this.retries) {
        if (now - old.since < interval) break;
        this.retries.delete(k);
      }
      // Full of keys held back this interval: this one's next report re-assigns it, as before retries.
      if (!this.retries.has(key) && this.retries.size >= (this.deps.maxRetrying ?? MAX_RETRYING)) return;
      r = { since: now, n: 0 };
      this.retries.delete(key);
      this.retries.set(key, r);
    }
    if (r.n++ >= RETRIES_PER_INTERVAL) return;
    this.changed(key, RETRY_MS);
  }

  /** Re-assignments of a bucket whose shares moved, after a short settle, for the streams of this process. */
  private changed(key: string, afterMs = SETTLE_MS): void {
    if (!this.watchers.has(key) || this.settling.has(key)) return;
    const timer = setTimeout(() => {
      this.settling.delete(key);
      for (const l of this.watchers.get(key) ?? []) l(key);
    }, afterMs);
    timer.unref();
    this.settling.set(key, timer);
  }

  /** Counts the requests a bucket's Envoy allowed on its long windows (reads them only when pushed), and reads
   * what RLS admitted on its short ones: one store call per bucket, which the Redis store batches with others by
   * the 512 keys. Each window is a group of its own that never blocks, so one window past any bound cannot keep
   * the others from being counted. */
  private async countWindows(u: BucketUsage, pushed: boolean): Promise<CheckResult | undefined> {
    const { quotas, rlsWindows } = u.plan;
    if (quotas.length === 0 && rlsWindows.length === 0) return undefined;
    const checks: CounterCheck[] = quotas.map((q, group) => ({ ...q.check, hits: pushed ? 0 : u.allowed, group, shadow: true }));
    for (const w of rlsWindows) checks.push({ ...w.check, group: checks.length, shadow: true });
    return await this.deps.store.check(checks);
  }

  close(): void {
    for (const t of this.settling.values()) clearTimeout(t);
    this.settling.clear();
  }
}

/** Share keys whose retries are counted at once: keys an interval old are forgotten first; past it, a key newly
 * held back waits for its next report. */
const MAX_RETRYING = 10_000;

/** An instance's buckets by share key: buckets that count on one counter (a shared wildcard, say) hold one entry
 * in its table, one grant split among them; the group's capacity is the least of theirs. */
type Groups = Map<string, { c: FleetCapacity; members: BucketUsage[] }>;

/** The limited buckets of a report by share key, from what their windows' counts say; those with a spent quota,
 * and the store's first failure. */
function grouped(
  limited: readonly BucketUsage[],
  counted: readonly PromiseSettledResult<CheckResult | undefined>[],
  pushed: boolean,
  horizonMs: number,
): { groups: Groups; spent: Set<BucketUsage>; failure: StoreUnavailableError | undefined } {
  const groups: Groups = new Map();
  const spent = new Set<BucketUsage>();
  let failure: StoreUnavailableError | undefined;
  limited.forEach((u, i) => {
    const r = counted[i]!;
    if (r.status === 'rejected') {
      failure ??= storeFailure(r.reason);
      return;
    }
    const c = fleetCapacity(u.plan, r.value, 0, pushed ? 0 : u.allowed, horizonMs);
    if (c.spent) {
      spent.add(u);
      return;
    }
    const g = groups.get(u.plan.shareKey);
    if (!g) groups.set(u.plan.shareKey, { c, members: [u] });
    else {
      g.members.push(u);
      if (c.ratePerSecond < g.c.ratePerSecond) g.c = c;
    }
  });
  return { groups, spent, failure };
}

/** A store's failure, as the reason a bucket got no answer; anything else (a bug) is thrown on. */
function storeFailure(err: unknown): StoreUnavailableError {
  if (err instanceof StoreUnavailableError) return err;
  throw err;
}

/** The demand of an instance's buckets that share one counter: their sum, as measured (the share table adds
 * the headroom of an instance under the level itself, to a bound on the fleet). */
function groupDemand(members: readonly BucketUsage[]): number {
  let sum = 0;
  for (const u of members) sum += u.demand;
  return sum;
}

/** A grant as Envoy's token bucket. Its burst is a tenth of a report interval of the rate (at most one second of
 * it): a changed bucket may start full (Envoy releases differ: docs/design/rlqs-envoy.md), and a grant changes
 * only when it moves by more than a tenth (fair-share.ts HYSTERESIS), so a change's refill costs less than what
 * the change is worth over the interval (two tokens at least, one second of the rate at most). For a quota the
 * burst is also held to a quarter of this instance's part of what is left, the most a long window can be
 * exceeded by. */
function strategyOf(c: FleetCapacity, rate: number, intervalMs: number): Strategy {
  // Two tokens at least: with one, a request that comes a little before its token loses the token's time.
  const burst = Math.max(2, rate * Math.min(1, intervalMs / 10_000));
  if (!Number.isFinite(c.left)) return bucketFor(rate, burst);
  return bucketFor(rate, Math.min(burst, Math.max(1, Math.floor((c.left * rate) / c.ratePerSecond / 4))));
}
