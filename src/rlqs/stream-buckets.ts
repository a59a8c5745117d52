import { MAX_UINT32 } from '../config/units.js';
import { type RequestBounds, tooLong } from '../rls/request.js';
import type { BucketBudget } from './bounds.js';
import type { WireBucketId, WireUsage } from './messages.js';
import type { BucketPlan } from './quota/bucket-plan.js';
import type { BucketUsage } from './quota/quota-service.js';
import { rateOf, type Strategy } from './quota/strategy.js';

/** One RLQS stream's view of its buckets: what Envoy reported, turned into the usages the quota service
 * assigns from, and the bounds that keep a stream's memory finite. Envoy's behaviour it is built on
 * (docs/design/rlqs-envoy.md): the domain is on every message; a new bucket is reported at once with
 * time_elapsed 0; every 5 s every bucket is reported, idle or not; counts are deltas; Envoy never drops a
 * bucket by itself (the server abandons idle ones); a BucketId may be empty, and is then not assignable. */

export interface StreamBucket {
  /** As Envoy sent it, to echo. */
  id: WireBucketId;
  plan: BucketPlan;
  lastReportMs: number;
  /** Periodic reports in a row with no request. */
  idleReports: number;
  /** Its demand at the last report (Infinity before one), for re-assignments between reports. */
  demand: number;
  /** What it was last told. */
  sent: Strategy | undefined;
  bytes: number;
}

export type Refusal = 'too_many_buckets' | 'empty_bucket_id' | 'bad_bucket_id';

export interface ReadReport {
  usages: BucketUsage[];
  /** The buckets of `usages`, in order. */
  buckets: StreamBucket[];
  /** Buckets to abandon: idle too long, or past the stream's bounds and idle. */
  abandon: WireBucketId[];
  /** Buckets past the stream's bounds that are in use: ALLOW_ALL with a TTL, no state kept. Abandoned, Envoy
   * would make them anew at the next request, admit it and report it at once: a loop that also admits. */
  overflow: WireBucketId[];
  /** Buckets given no assignment, by why. */
  refused: Record<Refusal, number>;
  /** Held buckets abandoned for being idle. */
  idle: number;
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

/** Counts above this are taken as this (uint64 on the wire; RLS bounds hits_addend the same). */
const MAX_COUNT = MAX_UINT32;
/** Bytes of BucketIds one stream holds (keys and values): past it, new buckets are overflow. */
const MAX_STREAM_BYTES = 16 * 1024 * 1024;

interface Merged {
  id: WireBucketId;
  text: Record<string, string>;
  allowed: number;
  denied: number;
  bytes: number;
}

export class StreamBuckets {
  private readonly buckets = new Map<string, StreamBucket>();
  /** The buckets held by share key (none for ''), so a moved grant finds its buckets without a scan. */
  private readonly byShare = new Map<string, Set<StreamBucket>>();
  private bytes = 0;

  constructor(
    private readonly limits: StreamLimits,
    private readonly plan: (bucket: Record<string, string>) => BucketPlan,
    /** The address's and the process's buckets, drawn on for each new bucket (bounds.ts). */
    private readonly budget: BucketBudget,
  ) {}

  /** Gives every bucket held back to the budget (the stream ended). */
  release(): void {
    this.budget.give(this.buckets.size);
    this.buckets.clear();
    this.byShare.clear();
    this.bytes = 0;
  }

  get size(): number {
    return this.buckets.size;
  }

  /** Reads one message's usages at `nowMs`: a bucket named twice counts once, with both counts. */
  read(usages: readonly WireUsage[], nowMs: number): ReadReport {
    const refused = { too_many_buckets: 0, empty_bucket_id: 0, bad_bucket_id: 0 };
    const out: ReadReport = { usages: [], buckets: [], abandon: [], overflow: [], refused, idle: 0, allowed: 0, denied: 0 };
    for (const [key, m] of this.merge(usages, out)) {
      out.allowed += m.allowed;
      out.denied += m.denied;
      const known = this.buckets.get(key);
      if (known) this.report(key, known, m, nowMs, out);
      else if (this.buckets.size >= this.limits.maxBuckets || this.bytes + m.bytes > MAX_STREAM_BYTES || !this.budget.take()) {
        out.refused.too_many_buckets++;
        (m.allowed + m.denied > 0 ? out.overflow : out.abandon).push(m.id);
      } else {
        const b: StreamBucket = { id: m.id, plan: this.plan(m.text), lastReportMs: nowMs, idleReports: 0, demand: Infinity, sent: undefined, bytes: m.bytes };
        this.buckets.set(key, b);
        this.index(b);
        this.bytes += b.bytes;
        this.report(key, b, m, nowMs, out, true);
      }
    }
    return out;
  }

  private report(key: string, b: StreamBucket, m: Merged, nowMs: number, out: ReadReport, first = false): void {
    if (!first) {
      this.unindex(b);
      b.plan = this.plan(m.text); // the config may have changed since
      this.index(b);
    }
    b.idleReports = m.allowed + m.denied > 0 || first ? 0 : b.idleReports + 1;
    if (b.idleReports >= this.limits.idleReports) {
      this.buckets.delete(key);
      this.unindex(b);
      this.budget.give(1);
      this.bytes -= b.bytes;
      out.abandon.push(b.id);
      out.idle++;
      return;
    }
    b.demand = first ? Infinity : rate(m.allowed + m.denied, nowMs - b.lastReportMs);
    b.lastReportMs = nowMs;
    out.usages.push({ plan: b.plan, allowed: m.allowed, demand: b.demand, running: b.sent ? rateOf(b.sent) : 0 });
    out.buckets.push(b);
  }

  /** The usages by bucket, checked and merged. At most twice the bucket bound of them are read from one
   * message (Envoy sends one per bucket it holds): the rest are refused, so a message cannot hold the loop. */
  private merge(usages: readonly WireUsage[], out: ReadReport): Map<string, Merged> {
    const merged = new Map<string, Merged>();
    const most = Math.min(usages.length, 2 * this.limits.maxBuckets);
    for (let i = 0; i < most; i++) {
      const u = usages[i]!;
      const id = u.bucket_id?.bucket ?? {};
      const bad = badBucket(id, this.limits.bounds);
      if (bad) {
        out.refused[bad]++;
        continue;
      }
      const key = canonicalId(id);
      const m = merged.get(key) ?? { id, text: textOf(id), allowed: 0, denied: 0, bytes: idBytes(id) };
      merged.set(key, m);
      m.allowed = Math.min(MAX_COUNT, m.allowed + count(u.num_requests_allowed));
      m.denied = Math.min(MAX_COUNT, m.denied + count(u.num_requests_denied));
    }
    out.refused.too_many_buckets += usages.length - most;
    return merged;
  }

  /** The share keys of the buckets held that are shares of a limit. */
  shareKeys(): ReadonlySet<string> {
    return new Set(this.byShare.keys());
  }

  /** The buckets held whose shares are those of `key`. */
  withShareKey(key: string): StreamBucket[] {
    return [...(this.byShare.get(key) ?? [])];
  }

  private index(b: StreamBucket): void {
    const key = b.plan.shareKey;
    if (key === '') return;
    const set = this.byShare.get(key);
    if (set) set.add(b);
    else this.byShare.set(key, new Set([b]));
  }

  private unindex(b: StreamBucket): void {
    const set = this.byShare.get(b.plan.shareKey);
    if (!set) return;
    set.delete(b);
    if (set.size === 0) this.byShare.delete(b.plan.shareKey);
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

/** One string per BucketId, whatever order its pairs came in, telling apart values that differ in any byte. */
function canonicalId(id: WireBucketId): string {
  return JSON.stringify(
    Object.keys(id)
      .sort()
      .map((k) => [k, id[k]!.toString('latin1')]),
  );
}

/** The values as text, for matching against the config (as RLS reads descriptor values: UTF-8). */
function textOf(id: WireBucketId): Record<string, string> {
  const text: Record<string, string> = {};
  for (const k of Object.keys(id)) text[k] = id[k]!.toString('utf8');
  return text;
}

function idBytes(id: WireBucketId): number {
  let n = 0;
  for (const k of Object.keys(id)) n += Buffer.byteLength(k) + id[k]!.length;
  return n;
}

/** Why a BucketId cannot be assigned: no pair (Envoy makes one when every dynamic value is empty; it refuses
 * actions for it), or one past the request bounds (pairs; bytes of a key or value, and of the whole id), or an
 * empty key or value. */
function badBucket(id: WireBucketId, bounds: StreamLimits['bounds']): Refusal | undefined {
  const keys = Object.keys(id);
  if (keys.length === 0) return 'empty_bucket_id';
  if (keys.length > bounds.maxEntries) return 'bad_bucket_id';
  let total = 0;
  for (const k of keys) {
    const v = id[k]!;
    if (k === '' || v.length === 0 || tooLong(k, bounds.maxValueBytes) || v.length > bounds.maxValueBytes) return 'bad_bucket_id';
    total += Buffer.byteLength(k) + v.length;
  }
  return total > bounds.maxValueBytes ? 'bad_bucket_id' : undefined;
}
