import { demandMoved, grantUnder, heldOf, planShares, REPLAN_SHIFT, type ShareEntry, type SharePlan } from '../../counters/fair-share.js';
import type { StoreUnavailableError } from '../../errors.js';

/** What RLQS assignments are made from: per bucket, every Envoy instance's demand and the rate it was last
 * granted, shared by every replica (Redis for a fleet, this process alone with the memory store). Per bucket of
 * a usage report, in one atomic step: write this instance's demand, compute its grant (counters/fair-share.ts
 * reserve) from the live entries, record it. A table found lost (missing, or younger than the one last seen while
 * that one should still live, or without the entry of an instance that runs a grant) is rebuilt for
 * `rebuildMs`: no grant grows past what its Envoy runs, so the rates in force never sum past what they did before
 * the loss while the instances' next reports record what each runs again. */

export interface ShareRequest {
  /** The bucket's share key (counters/keys.ts demandKey): fingerprints only, never request text. */
  key: string;
  /** The instance's fingerprint. */
  instance: string;
  /** Its demand as measured, requests a second; Infinity when unknown. */
  demand: number;
  /** What the whole fleet may admit now, requests a second. */
  capacity: number;
  /** How long the entry lives without a newer report: longer than the assignment's TTL, so an entry is never
   * gone while its Envoy may still run the rate it records. */
  ttlMs: number;
  /** The rate its Envoy may be running now (what it was last sent): recorded as held until a later call says it
   * was told less, so a shrink frees room only once it has been sent, never while it is in flight. */
  running: number;
  /** How long a table found lost is rebuilt: the assignments' TTL, after which no Envoy runs a grant the table
   * forgot. */
  rebuildMs: number;
  /** Envoy's report interval: the table's plan is made afresh at least five times in one (and at once when a
   * demand moves it), and an instance held below its fair share is told to the replicas at most once in one. */
  intervalMs: number;
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
  /** Held below its fair share by what the others hold, and no replica was told of the bucket for an interval:
   * the caller tells them (ShareEvents), so the others shrink. */
  tell: boolean;
}

/** A bucket's grant, or why the store could not make it (that bucket fails alone; its Envoy keeps what it has). */
export type ShareOutcome = ShareGrant | StoreUnavailableError;

export interface ShareStore {
  /** Never rejects for the store's failures: a bucket the store could not answer has its error in its place. */
  reserve(requests: readonly ShareRequest[], nowMs: number): Promise<ShareOutcome[]>;
  /** Why a call now would fail at once (the store is known down, or holds all it may wait for); else undefined. */
  unavailable(): StoreUnavailableError | undefined;
}

/** Most instances one bucket holds: past it, the entries nearest their end are dropped, so a bucket's table and
 * the arithmetic on it stay bounded whatever connects. */
export const MAX_INSTANCES_PER_BUCKET = 1024;

interface Held extends ShareEntry {
  expiresAtMs: number;
}

/** A table's plan (counters/fair-share.ts SharePlan) and the aggregates kept beside it, so a call reads O(1)
 * entries: what every entry holds, summed; when it was planned and when the replicas were last told. */
export interface PlanState {
  plan: SharePlan;
  heldSum: number;
  atMs: number;
  toldMs: number;
}

/** A grant held below its fair share by more than this share of the capacity is worth telling the replicas of. */
export const WORTH_TELLING = 0.02;

/** Whether a call re-plans the table: no plan, one planned a fifth of an interval ago, a new instance, the
 * capacity or this instance's demand moved enough to shift it, or the table is rebuilt. */
export function replanDue(state: PlanState | undefined, r: ShareRequest, own: ShareEntry | undefined, nowMs: number, rebuilding: boolean): boolean {
  if (!state || own === undefined || rebuilding || nowMs < state.atMs || nowMs - state.atMs >= r.intervalMs / 5) return true;
  if (Math.abs(r.capacity - state.plan.capacity) > REPLAN_SHIFT * state.plan.capacity) return true;
  return demandMoved(state.plan, own.demand, r.demand);
}

/** One bucket's table: its entries in the order they were first written (as a Redis hash keeps them), its birth
 * stamp and until when it is rebuilt. */
interface Table {
  entries: Map<string, Held>;
  born: number;
  rebuiltUntilMs: number;
  /** When its last entry expires: past it, the table holds nothing anyone runs. */
  endMs: number;
  state: PlanState | undefined;
}

/** Expired tables dropped per call at most, so a sweep never stalls a report; each call adds at most one table,
 * so the sweep keeps pace with the writes. */
const SWEEP_PER_CALL = 8;

/** What a process last saw of a bucket's table. */
export interface SeenTable {
  /** Its birth stamp: different for every table made of a key (Redis's clock in µs; the memory store counts). */
  born: number;
  /** Until when it was to live: missing or younger before then, it was lost. */
  endMs: number;
}

/** Tables this process has seen, so one found missing or younger is known lost. Bounded: past `max` keys the
 * one seen longest ago is forgotten (a table forgotten is still found lost through its instances' own entries).
 * About 400 bytes a key (measured). */
export class SeenTables {
  private readonly seen = new Map<string, SeenTable>();

  constructor(private readonly max = MAX_SEEN_TABLES) {}

  get(key: string): SeenTable | undefined {
    return this.seen.get(key);
  }

  set(key: string, table: SeenTable): void {
    this.seen.delete(key); // re-inserted last: the map's order is the order of last sight
    this.seen.set(key, table);
    if (this.seen.size > this.max) this.seen.delete(this.seen.keys().next().value!);
  }
}

/** Tables a process remembers having seen: those its streams report every interval stay, and a replica past it
 * holds so many buckets that losing the rest's first-write check costs little. */
export const MAX_SEEN_TABLES = 20_000;

/** Whether a table was lost: younger than the one seen while that one should still live, or without the entry
 * of an instance whose Envoy runs a grant. quota-share.lua decides the same. */
export function tableLost(seen: SeenTable | undefined, born: number, nowMs: number, running: number, hasEntry: boolean): boolean {
  return (seen !== undefined && nowMs < seen.endMs && born !== seen.born) || (running > 0 && !hasEntry);
}

/** The memory store's share table: this process alone (one replica, or a test). Bounded: at most `maxKeys`
 * buckets (the ones written longest ago go first) and MAX_INSTANCES_PER_BUCKET instances each. */
export class MemoryShareStore implements ShareStore {
  private readonly buckets = new Map<string, Table>();
  private readonly seen = new SeenTables();
  /** Tables made so far: each one's birth stamp. */
  private made = 0;

  constructor(
    private readonly maxKeys = 100_000,
    private readonly maxInstances = MAX_INSTANCES_PER_BUCKET,
  ) {}

  get size(): number {
    return this.buckets.size;
  }

  reserve(requests: readonly ShareRequest[], nowMs: number): Promise<ShareOutcome[]> {
    return Promise.resolve(requests.map((r) => this.one(r, nowMs)));
  }

  unavailable(): undefined {
    return undefined;
  }

  private one(r: ShareRequest, nowMs: number): ShareGrant {
    const table = this.buckets.get(r.key) ?? { entries: new Map<string, Held>(), born: ++this.made, rebuiltUntilMs: 0, endMs: 0, state: undefined };
    this.buckets.delete(r.key); // re-inserted last: the map's order is the order of last writes
    this.buckets.set(r.key, table);
    const own = table.entries.get(r.instance);
    if (tableLost(this.seen.get(r.key), table.born, nowMs, r.running, own !== undefined))
      table.rebuiltUntilMs = Math.max(table.rebuiltUntilMs, nowMs + r.rebuildMs);
    const rebuilding = nowMs < table.rebuiltUntilMs;
    const state = replanDue(table.state, r, own, nowMs, rebuilding) ? this.replan(table, r, nowMs) : table.state!;
    const heldByOthers = state.heldSum - (own?.assigned ?? 0);
    const { grant, fair } = grantUnder(state.plan, r.demand, heldByOthers, r.running, rebuilding ? r.running : Infinity, r.capacity);
    const held = heldOf(Math.max(grant, r.running));
    table.entries.set(r.instance, { instance: r.instance, demand: r.demand, assigned: held, expiresAtMs: nowMs + r.ttlMs });
    state.heldSum = heldByOthers + held;
    const tell = grant < fair - WORTH_TELLING * r.capacity && nowMs - state.toldMs >= r.intervalMs;
    if (tell) state.toldMs = nowMs;
    table.endMs = Math.max(table.endMs, nowMs + r.ttlMs);
    this.seen.set(r.key, { born: table.born, endMs: table.endMs });
    this.sweep(nowMs);
    while (this.buckets.size > this.maxKeys) this.buckets.delete(this.buckets.keys().next().value!);
    return { rate: grant, held, fair, previous: own?.assigned, tell };
  }

  /** Reads the whole table: drops expired entries (and, past the bound, those nearest their end), sums what the
   * others hold and plans the shares from every demand, the caller's first. */
  private replan(table: Table, r: ShareRequest, nowMs: number): PlanState {
    // In the table's order, an entry rewritten keeping its place (as a Redis hash does), so the sums below add
    // in the order quota-share.lua adds them.
    const others: Held[] = [];
    for (const [instance, held] of table.entries) {
      if (instance === r.instance) continue;
      if (held.expiresAtMs <= nowMs) table.entries.delete(instance);
      else others.push(held);
    }
    if (others.length >= this.maxInstances) dropNearestEnd(table.entries, others, others.length - this.maxInstances + 1);
    let heldSum = table.entries.get(r.instance)?.assigned ?? 0;
    let endMs = nowMs + r.ttlMs;
    for (const o of others) {
      heldSum += o.assigned;
      endMs = Math.max(endMs, o.expiresAtMs);
    }
    table.endMs = endMs;
    const plan = planShares(r.capacity, [r.demand, ...others.map((o) => o.demand)]);
    table.state = { plan, heldSum, atMs: nowMs, toldMs: table.state?.toldMs ?? -Infinity };
    return table.state;
  }

  /** Drops expired tables from the front of the map (the order of last writes), as Redis expires a share hash:
   * buckets nobody reports on again must not hold memory until maxKeys pushes them out (the fuzzer saw 300,000
   * such buckets keep 650 MiB of heap with no stream open). A table is forgotten only once every entry in it has
   * expired, so no grant in force is lost; SeenTables still knows it, so its return is not read as a loss. */
  private sweep(nowMs: number): void {
    let dropped = 0;
    for (const [key, table] of this.buckets) {
      if (table.endMs > nowMs || dropped++ >= SWEEP_PER_CALL) break;
      this.buckets.delete(key);
    }
  }
}

function dropNearestEnd(table: Map<string, Held>, others: Held[], n: number): void {
  const byEnd = [...others].sort((a, b) => a.expiresAtMs - b.expiresAtMs).slice(0, n);
  for (const h of byEnd) {
    table.delete(h.instance);
    others.splice(others.indexOf(h), 1);
  }
}
