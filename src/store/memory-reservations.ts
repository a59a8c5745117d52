import type { Held } from '../limits/charge-rules.js';
import type { CounterCheck, ReservationOutcome, UsageTag } from '../limits/check.js';
import { SizeIndex } from './size-index.js';
import { subjectOf, type UsageSubject } from './usage-ledger.js';

/** Most open reservations on one counter, in every store: a flood of invented request ids that fit the
 * budget fills one counter's table and is refused there, never the memory of the process or of Redis. Only
 * open reservations count: a busy counter's settled and refused records never refuse a new one. */
export const MAX_RESERVATIONS_PER_COUNTER = 10_000;

/** Most ended records (refused, settled, forgotten unsettled) kept on one counter, in every store: past it
 * the oldest is dropped. They only make a replayed settlement count once, so dropping one refuses nothing: a
 * settlement that then finds no record is a plain charge (settlement_key) or a new reservation. */
export const MAX_ENDED_PER_COUNTER = 1_000;

interface Record {
  held: NonNullable<Held>;
  /** A rule with a usage ledger: what its expiry's event names. */
  ledger?: UsageSubject;
  /** When it ends (open) or is forgotten (ended), in ms. */
  expiresAtMs: number;
  ttlMs: number;
}

type Table = Map<string, Map<string, Record>>;

/** The memory store's reservations: per counter, request id fingerprint → record, open and ended apart, with
 * an expiry index by second (as the store's own), so forgetting costs what expired. Open ones are bounded per
 * counter (the counter's own share: past it a new reservation is refused) and in all (shared by every counter:
 * past it the oldest open reservation of a counter that holds the most ends now, as if its ttl had run out,
 * so a client that invents tenants never refuses another's); ended ones per counter and in all (a bound drops
 * the oldest of the counter, or keeps no record when the store holds as many as it may). */
export class MemoryReservations {
  private readonly open: Table = new Map();
  private readonly ended: Table = new Map();
  private readonly expiries = new Map<number, Set<string>>();
  private openTotal = 0;
  /** Counters by how many open reservations they hold: where room is made at the shared bound. */
  private readonly bySize = new SizeIndex();
  /** Open reservations ended early since start to make room at the shared bound. */
  evictions = 0;
  private endedTotal = 0;
  /** Reservations forgotten unsettled since the last take. */
  private expired = 0;
  private nextSweepMs = 0;

  constructor(
    private readonly maxOpen: number,
    private readonly maxEnded = Math.max(1, Math.floor(maxOpen / 4)),
    private readonly onEvict: (evictions: number) => void = () => undefined,
    /** An open reservation of a rule with a usage ledger ended unsettled, charged at its estimate. */
    private readonly onExpired: (s: UsageSubject, id: string, estimate: number, atMs: number) => void = () => undefined,
  ) {}

  get size(): number {
    return this.openTotal + this.endedTotal;
  }

  held(c: CounterCheck, nowMs: number): Held {
    const { key, id } = c.reservation!;
    const o = this.open.get(key)?.get(id);
    if (o) return o.expiresAtMs > nowMs ? o.held : { ...(o.held as { estimate: number; atMs: number }), state: 'expired' };
    const e = this.ended.get(key)?.get(id);
    return e && e.expiresAtMs > nowMs ? e.held : undefined;
  }

  /** Whether one more may be opened on this counter (what has expired is forgotten first). At the bound shared
   * by all, room is made from the counter that holds the most: never a refusal. */
  full(c: CounterCheck, nowMs: number): boolean {
    const mine = (): boolean => (this.open.get(c.reservation!.key)?.size ?? 0) >= MAX_RESERVATIONS_PER_COUNTER;
    if (!mine() && this.openTotal < this.maxOpen) return false;
    this.sweep(nowMs, true);
    if (mine()) return true;
    if (this.openTotal >= this.maxOpen) this.evict(nowMs);
    return false;
  }

  /** Ends the oldest open reservation of a counter that holds the most, as its ttl running out would. */
  private evict(nowMs: number): void {
    const key = this.bySize.largest();
    const id = key === undefined ? undefined : this.open.get(key)?.keys().next().value;
    if (id === undefined) return;
    this.endUnsettled(key!, id, this.open.get(key!)!.get(id)!, nowMs);
    this.onEvict(++this.evictions);
  }

  /** Records what a decision did with a reservation: made opens one; refused, settled and unreserved end it
   * (an unreserved settlement is remembered as settled, so it counts once). */
  record(c: CounterCheck, o: ReservationOutcome, nowMs: number): void {
    const { key, id, ttlMs } = c.reservation!;
    if (o.event === 'late' || o.event === 'full') return;
    this.drop(this.open, key, id);
    this.drop(this.ended, key, id);
    if (o.event === 'made') {
      const r: Record = { held: { state: 'reserved', estimate: o.estimate, atMs: nowMs }, expiresAtMs: nowMs + ttlMs, ttlMs };
      if (c.usage) r.ledger = subjectOf(c as CounterCheck & { usage: UsageTag });
      this.put(this.open, key, id, r);
    } else {
      this.end(key, id, { held: { state: o.event === 'refused' ? 'refused' : 'settled' }, expiresAtMs: nowMs + ttlMs, ttlMs });
    }
  }

  /** Ends open reservations and forgets ended records that have expired by `nowMs` (at most once a second
   * unless `force`); returns how many were left unsettled since the last call. */
  sweep(nowMs: number, force = false): number {
    if (nowMs < this.nextSweepMs && !force) return this.take();
    this.nextSweepMs = nowMs + 1000;
    const now = Math.ceil(nowMs / 1000);
    for (const [second, entries] of this.expiries) {
      if (second > now) continue;
      this.expiries.delete(second);
      for (const entry of entries) this.expire(entry, nowMs);
    }
    return this.take();
  }

  clear(): void {
    this.open.clear();
    this.ended.clear();
    this.expiries.clear();
    this.bySize.clear();
    this.openTotal = 0;
    this.endedTotal = 0;
  }

  /** An open reservation past its ttl ends unsettled, charged at its estimate, its record kept one more ttl
   * so a late settlement is netted against it; an ended record past its time is forgotten. */
  private expire(entry: string, nowMs: number): void {
    const cut = entry.indexOf('\n');
    const key = entry.slice(0, cut);
    const id = entry.slice(cut + 1);
    const o = this.open.get(key)?.get(id);
    if (o && o.expiresAtMs <= nowMs) {
      this.endUnsettled(key, id, o, o.expiresAtMs);
      return;
    }
    const e = this.ended.get(key)?.get(id);
    if (e && e.expiresAtMs <= nowMs) this.drop(this.ended, key, id);
  }

  /** An open reservation ends unsettled at `atMs` (its ttl, or a bound's room), charged at its estimate; its
   * record is kept one more ttl so a late settlement is netted against it. */
  private endUnsettled(key: string, id: string, o: Record, atMs: number): void {
    this.drop(this.open, key, id);
    this.expired++;
    const held = { ...(o.held as { estimate: number; atMs: number }), state: 'expired' as const };
    if (o.ledger) this.onExpired(o.ledger, id, held.estimate, atMs);
    this.end(key, id, { held, expiresAtMs: atMs + o.ttlMs, ttlMs: o.ttlMs });
  }

  private end(key: string, id: string, r: Record): void {
    const table = this.ended.get(key);
    if (table && table.size >= MAX_ENDED_PER_COUNTER) this.drop(this.ended, key, table.keys().next().value!);
    if (this.endedTotal >= this.maxEnded) return;
    this.put(this.ended, key, id, r);
  }

  private put(tables: Table, key: string, id: string, r: Record): void {
    let table = tables.get(key);
    if (!table) {
      table = new Map();
      tables.set(key, table);
    }
    table.set(id, r);
    if (tables === this.open) {
      this.openTotal++;
      this.bySize.resized(key, table.size - 1, table.size);
    } else this.endedTotal++;
    const second = Math.ceil(r.expiresAtMs / 1000);
    const bucket = this.expiries.get(second);
    const entry = `${key}\n${id}`;
    if (bucket) bucket.add(entry);
    else this.expiries.set(second, new Set([entry]));
  }

  /** Removes a record and its expiry entry (so what is dropped before its time holds nothing either). */
  private drop(tables: Table, key: string, id: string): void {
    const table = tables.get(key);
    const r = table?.get(id);
    if (!table || !r) return;
    table.delete(id);
    if (table.size === 0) tables.delete(key);
    if (tables === this.open) {
      this.openTotal--;
      this.bySize.resized(key, table.size + 1, table.size);
    } else this.endedTotal--;
    const second = Math.ceil(r.expiresAtMs / 1000);
    const bucket = this.expiries.get(second);
    if (bucket?.delete(`${key}\n${id}`) && bucket.size === 0) this.expiries.delete(second);
  }

  private take(): number {
    const n = this.expired;
    this.expired = 0;
    return n;
  }
}
