import { reserve, type ShareEntry } from '../counters/fair-share.js';

/** What RLQS assignments are made from: per bucket, every Envoy instance's demand and the rate it was last
 * granted, shared by every replica (Redis for a fleet, this process alone with the memory store). One call per
 * bucket of a usage report: write this instance's demand, compute its grant (counters/fair-share.ts reserve)
 * from the live entries, record it, in one atomic step. */

export interface ShareRequest {
  /** The bucket's share key (counters/keys.ts demandKey): fingerprints only, never request text. */
  key: string;
  /** The instance's fingerprint. */
  instance: string;
  /** Its planned demand, requests a second; Infinity when unknown. */
  demand: number;
  /** What the whole fleet may admit now, requests a second. */
  capacity: number;
  /** How long the entry lives without a newer report: longer than the assignment's TTL, so an entry is never
   * gone while its Envoy may still run the rate it records. */
  ttlMs: number;
  /** The rate its Envoy may be running now (what it was last sent): recorded as held until a later call says it
   * was told less, so a shrink frees room only once it has been sent, never while it is in flight. */
  running: number;
}

export interface ShareGrant {
  /** What to send it now. */
  rate: number;
  /** What the table holds for it: the larger of `rate` and what it runs. */
  held: number;
  /** Its fair share: more than `rate` while the others' grants still hold the difference. */
  fair: number;
  /** What the table held for it before (undefined: a new entry). */
  previous: number | undefined;
}

export interface ShareStore {
  reserve(requests: readonly ShareRequest[], nowMs: number): Promise<ShareGrant[]>;
}

/** Most instances one bucket holds: past it, the entries nearest their end are dropped, so a bucket's table and
 * the arithmetic on it stay bounded whatever connects. */
export const MAX_INSTANCES_PER_BUCKET = 1024;

interface Held extends ShareEntry {
  expiresAtMs: number;
}

/** The memory store's share table: this process alone (one replica, or a test). Bounded: at most `maxKeys`
 * buckets (the ones written longest ago go first) and MAX_INSTANCES_PER_BUCKET instances each. */
export class MemoryShareStore implements ShareStore {
  private readonly buckets = new Map<string, Map<string, Held>>();

  constructor(
    private readonly maxKeys = 100_000,
    private readonly maxInstances = MAX_INSTANCES_PER_BUCKET,
  ) {}

  get size(): number {
    return this.buckets.size;
  }

  reserve(requests: readonly ShareRequest[], nowMs: number): Promise<ShareGrant[]> {
    return Promise.resolve(requests.map((r) => this.one(r, nowMs)));
  }

  private one(r: ShareRequest, nowMs: number): ShareGrant {
    const table = this.buckets.get(r.key) ?? new Map<string, Held>();
    this.buckets.delete(r.key); // re-inserted last: the map's order is the order of last writes
    this.buckets.set(r.key, table);
    const previous = table.get(r.instance)?.assigned;
    // In the table's order, an entry rewritten keeping its place (as a Redis hash does), so the sums below add in
    // the order quota-share.lua adds them.
    const others: Held[] = [];
    for (const [instance, held] of table) {
      if (instance === r.instance) continue;
      if (held.expiresAtMs <= nowMs) table.delete(instance);
      else others.push(held);
    }
    if (others.length >= this.maxInstances) dropNearestEnd(table, others, others.length - this.maxInstances + 1);
    const { grant, fair } = reserve(r.capacity, r.demand, others);
    const held = Math.max(grant, r.running);
    table.set(r.instance, { instance: r.instance, demand: r.demand, assigned: held, expiresAtMs: nowMs + r.ttlMs });
    while (this.buckets.size > this.maxKeys) this.buckets.delete(this.buckets.keys().next().value!);
    return { rate: grant, held, fair, previous };
  }
}

function dropNearestEnd(table: Map<string, Held>, others: Held[], n: number): void {
  const byEnd = [...others].sort((a, b) => a.expiresAtMs - b.expiresAtMs).slice(0, n);
  for (const h of byEnd) {
    table.delete(h.instance);
    others.splice(others.indexOf(h), 1);
  }
}
