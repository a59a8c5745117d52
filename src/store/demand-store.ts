/** What RLQS assignments are computed from: each Envoy instance's demand per bucket, shared by every replica
 * (Redis for a fleet, this process alone with the memory store). One batch call per usage report: write this
 * instance's demand for each of its buckets, and read back every live instance's, in one round trip. */

export interface DemandReport {
  /** The bucket's share key (counters/keys.ts demandKey): fingerprints only, never request text. */
  key: string;
  /** The instance's fingerprint. */
  instance: string;
  /** Requests a second it offered (allowed + denied) over its last report interval; Infinity when unknown. */
  demand: number;
  /** How long this entry lives without a newer report: an instance that stops reporting releases its share. */
  ttlMs: number;
}

export interface DemandEntry {
  instance: string;
  demand: number;
}

export interface DemandStore {
  /** Per report, in order: every instance whose entry is alive after this write, this one included. */
  exchange(reports: readonly DemandReport[], nowMs: number): Promise<DemandEntry[][]>;
}

/** Most instances one bucket holds: past it, the entries nearest their end are dropped, so a bucket's table and
 * the assignment arithmetic stay bounded whatever connects. */
export const MAX_INSTANCES_PER_BUCKET = 1024;

/** Infinity does not survive JSON or a Redis string: the wire writes it as -1. */
export const encodeDemand = (d: number): string => (Number.isFinite(d) ? String(Math.max(0, Math.round(d * 1000) / 1000)) : '-1');
export const decodeDemand = (s: string): number => {
  const n = Number(s);
  return n < 0 ? Infinity : Number.isFinite(n) ? n : 0;
};

interface Held {
  demand: number;
  expiresAtMs: number;
}

/** The memory store's demand table: this process alone (one replica, or a test). Bounded: at most `maxKeys`
 * buckets (the ones whose last write is oldest go first) and MAX_INSTANCES_PER_BUCKET instances each. */
export class MemoryDemandStore implements DemandStore {
  private readonly buckets = new Map<string, Map<string, Held>>();

  constructor(private readonly maxKeys = 100_000) {}

  get size(): number {
    return this.buckets.size;
  }

  exchange(reports: readonly DemandReport[], nowMs: number): Promise<DemandEntry[][]> {
    return Promise.resolve(reports.map((r) => this.write(r, nowMs)));
  }

  private write(r: DemandReport, nowMs: number): DemandEntry[] {
    let table = this.buckets.get(r.key);
    if (table)
      this.buckets.delete(r.key); // re-inserted last: the map's order is the order of last writes
    else table = new Map();
    this.buckets.set(r.key, table);
    table.set(r.instance, { demand: r.demand, expiresAtMs: nowMs + r.ttlMs });
    const live: DemandEntry[] = [];
    for (const [instance, held] of table) {
      if (held.expiresAtMs <= nowMs) table.delete(instance);
      else live.push({ instance, demand: held.demand });
    }
    while (this.buckets.size > this.maxKeys) this.buckets.delete(this.buckets.keys().next().value!);
    return table.size > MAX_INSTANCES_PER_BUCKET ? trim(table, live) : live;
  }
}

/** Drops the entries nearest their end until the bucket holds MAX_INSTANCES_PER_BUCKET. */
function trim(table: Map<string, Held>, live: DemandEntry[]): DemandEntry[] {
  const byEnd = [...table].sort((a, b) => a[1].expiresAtMs - b[1].expiresAtMs);
  for (const [instance] of byEnd.slice(0, table.size - MAX_INSTANCES_PER_BUCKET)) table.delete(instance);
  return live.filter((e) => table.has(e.instance));
}
