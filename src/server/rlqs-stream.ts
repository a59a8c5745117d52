import { canonicalBucket } from '../quota/bucket-descriptor.js';
import type { BucketPlan } from '../quota/bucket-plan.js';
import type { BucketUsage } from '../quota/quota-service.js';
import type { Strategy } from '../quota/strategy.js';
import type { RequestBounds } from './request.js';

/** One RLQS stream's view of its buckets: what Envoy reported, turned into the usages the quota service
 * assigns from, and the bounds that keep a stream's memory finite. Envoy's behaviour it is built on
 * (docs/design/rlqs-envoy.md): the domain is on every message; a new bucket is reported at once with
 * time_elapsed 0; every 5 s every bucket is reported, idle or not; counts are deltas; Envoy never drops a
 * bucket by itself (the server abandons idle ones); a BucketId may be empty, and is then not assignable. */

/** A BucketQuotaUsage as proto-loader gives it (keepCase, longs as numbers). */
export interface WireUsage {
  bucket_id?: { bucket?: Record<string, string> } | null;
  num_requests_allowed?: number;
  num_requests_denied?: number;
}

export interface StreamBucket {
  id: Record<string, string>;
  plan: BucketPlan;
  lastReportMs: number;
  /** Periodic reports in a row with no request. */
  idleReports: number;
  /** Its demand at the last report (Infinity before one), for re-assignments between reports. */
  demand: number;
  /** What it was last told. */
  sent: Strategy | undefined;
}

export type Refusal = 'too_many_buckets' | 'empty_bucket_id' | 'bad_bucket_id';

export interface ReadReport {
  usages: BucketUsage[];
  /** The buckets of `usages`, in order. */
  buckets: StreamBucket[];
  /** Buckets to abandon: idle too long, or past the stream's bound. */
  abandon: Record<string, string>[];
  refused: Refusal[];
  allowed: number;
  denied: number;
}

export interface StreamLimits {
  bounds: Pick<RequestBounds, 'maxEntries' | 'maxValueBytes'>;
  maxBuckets: number;
  reportIntervalMs: number;
  /** Periodic reports with no request after which a bucket is abandoned. */
  idleReports: number;
}

/** Counts above this are taken as this (uint64 on the wire; no Envoy reports more in 5 s). */
const MAX_COUNT = 1e12;

export class StreamBuckets {
  private readonly buckets = new Map<string, StreamBucket>();

  constructor(
    private readonly limits: StreamLimits,
    private readonly plan: (id: Record<string, string>, known?: BucketPlan) => BucketPlan,
  ) {}

  get size(): number {
    return this.buckets.size;
  }

  /** Reads one message's usages at `nowMs`. */
  read(usages: readonly WireUsage[], nowMs: number): ReadReport {
    const out: ReadReport = { usages: [], buckets: [], abandon: [], refused: [], allowed: 0, denied: 0 };
    for (const u of usages) {
      const id = u.bucket_id?.bucket ?? {};
      const bad = badBucket(id, this.limits.bounds);
      if (bad) {
        out.refused.push(bad);
        continue;
      }
      const allowed = count(u.num_requests_allowed);
      const denied = count(u.num_requests_denied);
      out.allowed += allowed;
      out.denied += denied;
      const key = canonicalBucket(id);
      const known = this.buckets.get(key);
      if (!known && this.buckets.size >= this.limits.maxBuckets) {
        out.refused.push('too_many_buckets');
        out.abandon.push(id);
        continue;
      }
      const b = known ?? { id: { ...id }, plan: this.plan(id), lastReportMs: nowMs, idleReports: 0, demand: Infinity, sent: undefined };
      if (!known) this.buckets.set(key, b);
      else b.plan = this.plan(id, b.plan);
      if (this.idle(b, allowed + denied, known !== undefined)) {
        this.buckets.delete(key);
        out.abandon.push(b.id);
        continue;
      }
      b.demand = known ? rate(allowed + denied, nowMs - b.lastReportMs) : Infinity;
      out.usages.push({ plan: b.plan, allowed, demand: b.demand });
      out.buckets.push(b);
      b.lastReportMs = nowMs;
    }
    return out;
  }

  /** The share keys of the buckets held that are shares of a limit. */
  shareKeys(): Set<string> {
    const keys = new Set<string>();
    for (const b of this.buckets.values()) if (b.plan.shareKey !== '') keys.add(b.plan.shareKey);
    return keys;
  }

  /** The buckets held whose shares are those of `key`. */
  withShareKey(key: string): StreamBucket[] {
    return [...this.buckets.values()].filter((b) => b.plan.shareKey === key);
  }

  private idle(b: StreamBucket, requests: number, known: boolean): boolean {
    b.idleReports = requests > 0 || !known ? 0 : b.idleReports + 1;
    return b.idleReports >= this.limits.idleReports;
  }
}

/** Requests a second over an interval measured on this replica's clock: Envoy's time_elapsed is whole seconds
 * (0 for a new bucket), too coarse at 5 s. An interval under a second (a report soon after the bucket's first)
 * counts as a second, so a short one does not inflate the rate. */
function rate(requests: number, elapsedMs: number): number {
  return (requests * 1000) / Math.max(elapsedMs, 1000);
}

function count(n: number | undefined): number {
  return typeof n === 'number' && n > 0 ? Math.min(n, MAX_COUNT) : 0;
}

/** Why a BucketId cannot be assigned: no pair (Envoy makes one when every dynamic value is empty; it refuses
 * actions for it), or one past the request bounds (pairs, bytes), or an empty key or value. */
function badBucket(id: Record<string, string>, bounds: StreamLimits['bounds']): Refusal | undefined {
  const keys = Object.keys(id);
  if (keys.length === 0) return 'empty_bucket_id';
  if (keys.length > bounds.maxEntries) return 'bad_bucket_id';
  for (const k of keys) {
    const v = id[k]!;
    if (k === '' || v === '' || Buffer.byteLength(k) > bounds.maxValueBytes || Buffer.byteLength(v) > bounds.maxValueBytes) return 'bad_bucket_id';
  }
  return undefined;
}
