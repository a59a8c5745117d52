import type { Logger } from 'pino';
import { type Clock, systemClock } from '../counters/clock.js';
import { windowStartMs } from '../counters/window.js';
import { decideCharges } from '../limits/charge-rules.js';
import { type CheckResult, type CounterCheck, type CounterWindow, settle } from '../limits/check.js';
import type { Series } from '../limits/kinds/algorithm.js';
import { ALGORITHMS } from '../limits/kinds/index.js';
import { MemoryReservations } from './memory-reservations.js';
import { MemorySlotCensus } from './memory-slot-census.js';
import { MemorySlotLeases } from './memory-slot-leases.js';
import { MemorySlots } from './memory-slots.js';
import { MemorySpendTop } from './memory-spend-top.js';
import { MemoryUsageLedger } from './memory-usage-ledger.js';
import { spendListed } from './spend-top.js';
import type { Store, StoreHealth } from './store.js';
import { DEFAULT_USAGE_MAX_LEN, subjectOf, type UsageSubject, usageOutcomes } from './usage-ledger.js';

export interface MemoryStoreOptions {
  clock?: Clock;
  /** Most counters kept at once. When reached, expired windows are reclaimed first, then counters are
   * evicted, cheapest first (see makeRoom): an evicted counter restarts from zero, so its client may get
   * more than its limit; each eviction is counted and logged. */
  maxCounters?: number;
  /** Most open reservations kept at once (charge_mode's reservation_key): past it, the counter holding the
   * most ends its oldest (memory-reservations.ts). */
  maxReservations?: number;
  /** Most usage-ledger events kept (USAGE_LEDGER_MAX_LEN): a ring read through the admin API. */
  usageMaxLen?: number;
  /** Most in-flight holders kept at once: past it, the counter holding the most loses its soonest-ending one
   * (memory-slots.ts). */
  maxSlotHolders?: number;
  logger?: Pick<Logger, 'warn'>;
}

const defaults = {
  maxCounters: 1_000_000,
  maxReservations: 1_000_000,
  // A holder of an invented tenant costs ~0.9 KB of live heap as the service keeps it (its counter's record, keys
  // and indexes with it; 170 B at 20 a counter): 50,000 requests in flight at once on one replica keep the worst
  // case near 45 MB (a heap snapshot at the bound, 2026-12-02: 65 MB live in all).
  maxSlotHolders: 50_000,
};

/** How many of the oldest counters an eviction compares when none is on probation. */
const EVICTION_SAMPLE = 32;

/** Counters in this process. Exact under concurrency because a check runs to completion on the event loop
 * before the next starts. */
export class MemoryStore implements Store {
  readonly kind = 'memory';
  private readonly series = new Map<string, Series>();
  /** Keys by expiry second: windows end on shared boundaries, so there are few buckets and reclaiming is
   * proportional to what expired, not to the number of counters. A key is in exactly one bucket, its series'
   * `e`, and leaves it when the series moves, expires, is evicted or reset: nothing outlives its counter. */
  private readonly expiries = new Map<number, Set<string>>();
  private readonly clock: Clock;
  private readonly maxCounters: number;
  /** A whole second at creation; series times count seconds from it. */
  private readonly baseMs: number;
  private nextSweepMs = 0;
  private lastEvictionLogMs = 0;
  /** Counters counted once so far, oldest first: the first to go when the store is full. A flood of
   * invented tokens (each counted once) stays here and evicts itself; a counter counted again leaves it. */
  private readonly probation = new Set<string>();
  /** Counters created by the check running now: never the ones it evicts to make room (a request's second
   * new window would evict its first, and a new client's counts would never get past 1). */
  private readonly fresh = new Set<string>();
  readonly reservations: MemoryReservations;
  readonly slots: MemorySlots;
  readonly slotLeases: MemorySlotLeases;
  readonly slotCensus: MemorySlotCensus;
  readonly spendTop: MemorySpendTop;
  readonly usage: MemoryUsageLedger;
  evictions = 0;

  constructor(private readonly opts: MemoryStoreOptions = {}) {
    this.clock = opts.clock ?? systemClock;
    this.maxCounters = opts.maxCounters ?? defaults.maxCounters;
    this.baseMs = this.clock.now() - (this.clock.now() % 1000);
    const max = opts.maxReservations ?? defaults.maxReservations;
    const ended = 'open reservations at their bound: the oldest of a counter that holds most ends now, charged at its estimate';
    this.usage = new MemoryUsageLedger(opts.usageMaxLen ?? DEFAULT_USAGE_MAX_LEN);
    const expiredEvent = (s: UsageSubject, id: string, estimate: number, atMs: number) => this.usage.append(s, 'expired', estimate, estimate, id, atMs);
    this.reservations = new MemoryReservations(max, undefined, this.evictionLog(max, ended), expiredEvent);
    const holders = opts.maxSlotHolders ?? defaults.maxSlotHolders;
    this.slots = new MemorySlots(
      holders,
      this.evictionLog(holders, 'in-flight holders at their bound: the soonest-ending holder of a counter that holds most goes'),
    );
    this.slotLeases = new MemorySlotLeases(this.slots, this.clock);
    this.slotCensus = new MemorySlotCensus(this.slots, this.clock);
    this.spendTop = new MemorySpendTop(this.clock);
  }

  get size(): number {
    return this.series.size;
  }

  /** A warning when a shared bound made room (memory-slots.ts, memory-reservations.ts): once a minute. */
  private evictionLog(max: number, why: string): (evictions: number) => void {
    let loggedMs = -Infinity;
    return (evictions) => {
      const nowMs = this.clock.now();
      if (nowMs - loggedMs < 60_000) return;
      loggedMs = nowMs;
      this.opts.logger?.warn({ max, evictions }, why);
    };
  }

  /** Keys in the expiry index: always `size`, which is what bounds the store's memory by maxCounters. */
  get indexedKeys(): number {
    let n = 0;
    for (const bucket of this.expiries.values()) n += bucket.size;
    return n;
  }

  check(checks: readonly CounterCheck[]): CheckResult {
    const nowMs = this.clock.now();
    if (nowMs >= this.nextSweepMs) this.sweep(nowMs);
    const n = checks.length;
    const curr = new Array<number>(n);
    const prev = new Array<number>(n);
    const over = new Array<boolean>(n);
    let charges = false;
    for (let i = 0; i < n; i++) {
      const c = checks[i]!;
      const a = ALGORITHMS[c.kind]!;
      if (c.charge || a.series === undefined) charges = true;
      if (a.series === undefined) {
        // Slots, not a series: decided with the charges (charge-rules.ts), from the slots held.
        curr[i] = 0;
        prev[i] = 0;
        over[i] = false;
        continue;
      }
      a.series.read(this.series.get(c.key), c, nowMs, this.baseMs, i, curr, prev);
      over[i] = a.exceeds(c, a.used(c, curr[i]!, prev[i]!, nowMs), Math.max(c.hits, 1));
    }
    if (charges) return this.checkCharges(checks, nowMs, curr, prev);
    const { admitted, groupOver } = settle(checks, over);
    if (this.fresh.size > 0) this.fresh.clear();
    if (admitted) {
      for (let i = 0; i < n; i++) {
        const c = checks[i]!;
        if (c.hits === 0 || groupOver[c.group]) continue;
        this.add(c, curr[i]!, nowMs, c.hits);
      }
    }
    return { nowMs, admitted, curr, prev, over };
  }

  /** A request with a charge or a reservation: decided by charge-rules.ts, which says what each window gets. */
  private checkCharges(checks: readonly CounterCheck[], nowMs: number, curr: number[], prev: number[]): CheckResult {
    // A ledger's reservations end when due, as Redis's script ends its counter's (their events come first).
    const ledgered = checks.some((c) => c.usage && c.reservation);
    const expired = this.reservations.sweep(nowMs, ledgered);
    const expiredGroups = ledgered ? this.expiredGroups(checks, nowMs) : undefined;
    const slotsExpired = this.readSlots(checks, nowMs, curr);
    const used = checks.map((c, i) => ALGORITHMS[c.kind]!.used(c, curr[i]!, prev[i]!, nowMs));
    const d = decideCharges(checks, used, curr, nowMs, {
      held: (c) => this.reservations.held(c, nowMs),
      full: (c) => this.reservations.full(c, nowMs),
      holding: (c) => this.slots.holding(c, nowMs),
    });
    if (this.fresh.size > 0) this.fresh.clear();
    checks.forEach((c, i) => {
      const n = d.counted[i]!;
      if (ALGORITHMS[c.kind]!.slots) {
        if (n > 0) this.slots.take(c, n, nowMs);
        else if (n < 0) this.slots.give(c, -n);
      } else if (n !== 0) {
        this.add(c, curr[i]!, nowMs, n);
        if (spendListed(c)) this.spendTop.note(c, this.usedNow(c, nowMs), nowMs);
      }
      const o = d.reservations[c.group];
      // Once per group: its first window carries the record.
      if (o && checks.findIndex((x) => x.group === c.group) === i) this.reservations.record(c, o, nowMs);
    });
    const result: CheckResult = { nowMs, admitted: d.admitted, curr, prev, over: d.over, counted: d.counted, reservations: d.reservations, expired };
    for (const e of usageOutcomes(checks, result, expiredGroups)) this.usage.append(subjectOf(e.check), e.outcome, e.tokens, e.estimate, e.rid, nowMs);
    if (slotsExpired) result.slotsExpired = slotsExpired;
    return result;
  }

  /** The slots held by each in-flight check (into curr), ending the leases that ran out; per check, how many
   * did. Then the pools whose every lease ended go (those of this request's counters were looked at first, so
   * what ended on them is counted). */
  private readSlots(checks: readonly CounterCheck[], nowMs: number, curr: number[]): number[] | undefined {
    let expired: number[] | undefined;
    checks.forEach((c, i) => {
      if (!ALGORITHMS[c.kind]!.slots) return;
      const [held, ended] = this.slots.held(c, nowMs);
      curr[i] = held;
      expired ??= new Array<number>(checks.length).fill(0);
      expired[i] = ended;
    });
    if (expired) this.slots.sweep(nowMs);
    return expired;
  }

  health(): StoreHealth {
    return { degraded: false, reason: undefined };
  }

  reset(windows: readonly CounterWindow[]): Promise<number> {
    let removed = 0;
    for (const w of windows) {
      const s = this.series.get(w.key);
      if (s === undefined) continue;
      this.drop(s);
      removed++;
    }
    return Promise.resolve(removed);
  }

  /** Current count of a window, for inspection and tests. */
  peek(key: string, windowMs: number): number {
    const s = this.series.get(key);
    return s !== undefined && s.w === this.seconds(windowStartMs(this.clock.now(), windowMs)) ? s.c : 0;
  }

  close(): Promise<void> {
    this.series.clear();
    this.expiries.clear();
    this.reservations.clear();
    this.slots.clear();
    return Promise.resolve();
  }

  private seconds(ms: number): number {
    return (ms - this.baseMs) / 1000;
  }

  /** The groups whose reservation ended unsettled before this request (its expired event said the estimate). */
  private expiredGroups(checks: readonly CounterCheck[], nowMs: number): Set<number> {
    const out = new Set<number>();
    for (const c of checks) if (c.usage && c.reservation && this.reservations.held(c, nowMs)?.state === 'expired') out.add(c.group);
    return out;
  }

  /** What the check's counter holds now, as its kind weighs it (after a charge: what the spend list orders by). */
  private usedNow(c: CounterCheck, nowMs: number): number {
    const curr = [0];
    const prev = [0];
    const a = ALGORITHMS[c.kind]!;
    a.series!.read(this.series.get(c.key), c, nowMs, this.baseMs, 0, curr, prev);
    return a.used(c, curr[0]!, prev[0]!, nowMs);
  }

  /** Counts `hits` (a settlement's or a refund's may be negative: a value stays at 0 or more) as the check's
   * algorithm does; curr is what check() read. */
  private add(c: CounterCheck, curr: number, nowMs: number, hits: number): void {
    const s = this.seriesFor(c.key, nowMs);
    this.expireAt(s, ALGORITHMS[c.kind]!.series!.add(s, c, curr, nowMs, this.baseMs, hits));
  }

  private seriesFor(key: string, nowMs: number): Series {
    let s = this.series.get(key);
    if (s === undefined) {
      if (this.series.size >= this.maxCounters) this.makeRoom(nowMs);
      const k = flat(key);
      s = { k, w: 0, c: 0, p: 0, e: 0 };
      this.series.set(k, s);
      this.probation.add(k);
      this.fresh.add(k);
    } else this.probation.delete(s.k); // counted a second time: no longer on probation
    return s;
  }

  /** Moves a series to the expiry bucket of second `expires` (from the base). */
  private expireAt(s: Series, expires: number): void {
    if (s.e !== expires) {
      this.expiries.get(s.e)?.delete(s.k);
      s.e = expires;
      const bucket = this.expiries.get(expires);
      if (bucket) bucket.add(s.k);
      else this.expiries.set(expires, new Set([s.k]));
    }
  }

  /** Removes a series and its entry in the expiry index. */
  private drop(s: Series): void {
    this.series.delete(s.k);
    this.probation.delete(s.k);
    const bucket = this.expiries.get(s.e);
    bucket?.delete(s.k);
    if (bucket?.size === 0) this.expiries.delete(s.e);
  }

  private sweep(nowMs: number): void {
    this.nextSweepMs = nowMs + 1000;
    const now = this.seconds(nowMs);
    for (const [expires, keys] of this.expiries) {
      if (expires > now) continue;
      for (const k of keys) {
        this.series.delete(k);
        this.probation.delete(k);
      }
      this.expiries.delete(expires);
    }
  }

  private makeRoom(nowMs: number): void {
    this.sweep(nowMs);
    if (this.series.size < this.maxCounters) return;
    this.drop(this.cheapest());
    this.evictions++;
    if (nowMs - this.lastEvictionLogMs >= 60_000) {
      this.lastEvictionLogMs = nowMs;
      this.opts.logger?.warn({ maxCounters: this.maxCounters, evictions: this.evictions }, 'memory store full: evicting the cheapest counters');
    }
  }

  /** The counter whose loss admits least: losing a count of n lets up to n more requests in. The oldest
   * counter on probation (counted once), else, among the EVICTION_SAMPLE oldest, the one with the smallest
   * count (a bucket's debt stands for its count), so a client that spent its quota outlives a flood of
   * fresh tokens. */
  private cheapest(): Series {
    for (const k of this.probation) if (!this.fresh.has(k)) return this.series.get(k)!;
    let best: Series | undefined;
    let seen = 0;
    for (const s of this.series.values()) {
      if (this.fresh.has(s.k)) continue;
      if (!best || s.c < best.c) best = s;
      if (++seen >= EVICTION_SAMPLE) break;
    }
    // Only this check's own counters left (a store smaller than one request): the oldest of them.
    return best ?? (this.series.values().next().value as Series);
  }
}

/** A copy of `key` in one piece. Keys are built by concatenation, which V8 keeps as a tree of parts; held for
 * an hour by a million counters, the tree costs ~150 bytes more per counter than one flat string (measured
 * by bench/memory.mjs). Keys are ASCII by construction (URL-encoded names, hex fingerprints), so latin1 is
 * exact. Runs once per new counter, not per request. */
function flat(key: string): string {
  return Buffer.from(key, 'latin1').toString('latin1');
}
