import type { Held } from './charge-rules.js';
import type { CounterCheck, ReservationOutcome } from './store.js';

/** Most open reservations on one counter, in every store: a flood of invented request ids fills one
 * counter's table and is refused there, never the memory of the process or of Redis. */
export const MAX_RESERVATIONS_PER_COUNTER = 10_000;

interface Record {
  held: NonNullable<Held>;
  /** When it is forgotten (ms). */
  expiresAtMs: number;
}

/** The memory store's reservations: per counter, request id fingerprint → record, with an expiry index by
 * second (as the store's own), so forgetting costs what expired. Bounded per counter and in all. */
export class MemoryReservations {
  private readonly byCounter = new Map<string, Map<string, Record>>();
  private readonly expiries = new Map<number, Set<string>>();
  private total = 0;
  /** Reservations forgotten unsettled since the last take. */
  private expired = 0;
  private nextSweepMs = 0;

  constructor(private readonly maxTotal: number) {}

  get size(): number {
    return this.total;
  }

  held(c: CounterCheck, nowMs: number): Held {
    const r = this.byCounter.get(c.reservation!.key)?.get(c.reservation!.id);
    return r && r.expiresAtMs > nowMs ? r.held : undefined;
  }

  /** Whether one more may be made on this counter, and in all (what has expired is forgotten first). */
  full(c: CounterCheck, nowMs: number): boolean {
    const at = (): boolean => this.total >= this.maxTotal || (this.byCounter.get(c.reservation!.key)?.size ?? 0) >= MAX_RESERVATIONS_PER_COUNTER;
    if (!at()) return false;
    this.sweep(nowMs, true);
    return at();
  }

  /** Records what a decision did with a reservation: made and refused are new records, settled replaces
   * one, keeping its expiry. */
  record(c: CounterCheck, o: ReservationOutcome, nowMs: number): void {
    const { key, id, ttlMs } = c.reservation!;
    let table = this.byCounter.get(key);
    const old = table?.get(id);
    if (o.event === 'settled' && old) {
      old.held = { state: 'settled' };
      return;
    }
    if (o.event !== 'made' && o.event !== 'refused') return;
    if (!table) {
      table = new Map();
      this.byCounter.set(key, table);
    }
    if (old) this.forget(key, id, old, old.expiresAtMs <= nowMs); // an expired record still in place
    const r: Record = {
      held: o.event === 'made' ? { state: 'reserved', estimate: o.estimate, atMs: nowMs } : { state: 'refused' },
      expiresAtMs: nowMs + ttlMs,
    };
    table.set(id, r);
    this.total++;
    const second = Math.ceil(r.expiresAtMs / 1000);
    const bucket = this.expiries.get(second);
    const entry = `${key}\n${id}`;
    if (bucket) bucket.add(entry);
    else this.expiries.set(second, new Set([entry]));
  }

  /** Forgets what has expired by `nowMs` (at most once a second unless `force`); returns how many were left
   * unsettled since the last call. */
  sweep(nowMs: number, force = false): number {
    if (nowMs < this.nextSweepMs && !force) return this.take();
    this.nextSweepMs = nowMs + 1000;
    const now = Math.ceil(nowMs / 1000);
    for (const [second, entries] of this.expiries) {
      if (second > now) continue;
      for (const entry of entries) {
        const [key, id] = entry.split('\n') as [string, string];
        const r = this.byCounter.get(key)?.get(id);
        if (r && r.expiresAtMs <= nowMs) this.forget(key, id, r, true);
      }
      this.expiries.delete(second);
    }
    return this.take();
  }

  private take(): number {
    const n = this.expired;
    this.expired = 0;
    return n;
  }

  clear(): void {
    this.byCounter.clear();
    this.expiries.clear();
    this.total = 0;
  }

  private forget(key: string, id: string, r: Record, counted: boolean): void {
    const table = this.byCounter.get(key)!;
    table.delete(id);
    if (table.size === 0) this.byCounter.delete(key);
    this.total--;
    if (counted && r.held.state === 'reserved') this.expired++;
  }
}
