import type { CounterCheck } from '../limits/check.js';
import { SizeIndex } from './size-index.js';

/** Leases ended per call, at most (slots.lua's SLOT_PURGE). */
const SLOT_PURGE = 100;

/** A holder of in-flight slots: a request id's fingerprint, or (slots as counts) a number of its own. */
interface Holder {
  slots: number;
  /** When its lease ends, in ms: its slots come back then if nobody gave them back. */
  untilMs: number;
}

interface Pool {
  /** In the order they took their slots: the order their leases end while the rule's lease stays the same
   * (leaseOrder). */
  holders: Map<string, Holder>;
  held: number;
  /** The latest lease end: the pool is dropped once it has passed. */
  untilMs: number;
  /** Whether the holders' leases end in the order they were taken: true unless a take came with a shorter
   * lease than one before it (a reload shortened the rule's lease). */
  ordered: boolean;
  seq: number;
}

/** The memory store's in-flight slots (an `in_flight` rule): per counter, who holds how many slots until
 * when. What slots.lua keeps in Redis, with the same answers. Holders are at most the counter's limit (each
 * holds at least one slot), in all at most `maxHolders`. Past that a new take is never refused: the holder whose
 * lease ends soonest in a pool that holds the most goes (evictions), so a client that invents tenants to fill
 * the bound loosens its own counters' limits by one, never another tenant's first take. A pool leaves when its
 * last holder does, or with its last lease, through an expiry index by second like the store's own. */
export class MemorySlots {
  private readonly pools = new Map<string, Pool>();
  private readonly expiries = new Map<number, Set<string>>();
  /** Pools by how many holders they have: where room is made when the bound is reached. */
  private readonly bySize = new SizeIndex();
  private total = 0;
  private nextSweepMs = 0;
  /** Holders evicted since start to make room (the bound was reached). */
  evictions = 0;

  constructor(
    private readonly maxHolders: number,
    private readonly onEvict: (evictions: number) => void = () => undefined,
  ) {}

  /** Slots held on c's counter now, after the leases that ran out ended; returns [held, expired]. Holders
   * are looked at in the order their leases end (leaseOrder): the first one still live ends the look, so a call
   * costs what ended, not what is held (a pool whose lease was shortened is sorted first).
   * At most SLOT_PURGE end per call, as in slots.lua (the rest count as held until a later call: a refusal too
   * many, never an admission too many); the request's own id's ended lease ends whatever the bound. */
  held(c: Pick<CounterCheck, 'key' | 'slots'>, nowMs: number): [number, number] {
    const p = this.pools.get(c.key);
    if (!p) return [0, 0];
    let expired = 0;
    let ended = 0;
    for (const [id, h] of leaseOrder(p)) {
      if (ended === SLOT_PURGE) break;
      if (h.untilMs > nowMs) break;
      expired += h.slots;
      ended++;
      this.remove(c.key, p, id, h);
    }
    const id = c.slots?.id;
    const own = id === undefined ? undefined : p.holders.get(id);
    if (own && own.untilMs <= nowMs) {
      expired += own.slots;
      this.remove(c.key, p, id!, own);
    }
    return [p.held, expired];
  }

  /** Slots the request's id holds on c's counter (0 without an id, or none held). */
  holding(c: CounterCheck, nowMs: number): number {
    const h = c.slots?.id === undefined ? undefined : this.pools.get(c.key)?.holders.get(c.slots.id);
    return h && h.untilMs > nowMs ? h.slots : 0;
  }

  take(c: CounterCheck, n: number, nowMs: number): void {
    if (this.total >= this.maxHolders) this.evict();
    let p = this.pools.get(c.key);
    if (!p) {
      p = { holders: new Map(), held: 0, untilMs: 0, ordered: true, seq: 0 };
      this.pools.set(c.key, p);
    }
    const id = c.slots?.id ?? `#${++p.seq}`;
    const before = p.holders.get(id);
    // The same id twice in one request: one holding, of the last take's slots.
    if (before) this.remove(c.key, p, id, before, false);
    const untilMs = nowMs + c.windowMs;
    if (untilMs < p.untilMs) p.ordered = false;
    p.holders.set(id, { slots: n, untilMs });
    this.bySize.resized(c.key, p.holders.size - 1, p.holders.size);
    p.held += n;
    this.total++;
    if (untilMs > p.untilMs) this.expireAt(c.key, p, untilMs);
  }

  /** Renews the id's slots on `key` until `untilMs` (never shortened); false when it holds none now (given
   * back, evicted, or its lease ended). A renewed holder moves last: the order of lease ends stays true while the
   * rule's lease stays the same (a renewal to a max_hold end sooner than another's lease sorts the pool). */
  renew(key: string, id: string, untilMs: number, nowMs: number): boolean {
    const p = this.pools.get(key);
    const h = p?.holders.get(id);
    if (!p || !h || h.untilMs <= nowMs) return false;
    if (untilMs <= h.untilMs) return true;
    p.holders.delete(id);
    p.holders.set(id, h);
    if (untilMs < p.untilMs) p.ordered = false;
    h.untilMs = untilMs;
    if (untilMs > p.untilMs) this.expireAt(key, p, untilMs);
    return true;
  }

  /** Makes room for one holder: the one whose lease ends soonest, of a pool that holds the most. */
  private evict(): void {
    const key = this.bySize.largest();
    const p = key === undefined ? undefined : this.pools.get(key);
    if (!p) return;
    const [id, h] = leaseOrder(p)[Symbol.iterator]().next().value!;
    this.remove(key!, p, id, h);
    this.onEvict(++this.evictions);
  }

  /** Gives back `n` slots: the id's, or (no id) the oldest holders' first. */
  give(c: CounterCheck, n: number): void {
    const p = this.pools.get(c.key);
    if (!p) return;
    const id = c.slots?.id;
    if (id !== undefined) {
      const h = p.holders.get(id);
      if (h) this.remove(c.key, p, id, h);
      return;
    }
    let left = n;
    for (const [k, h] of leaseOrder(p)) {
      if (left <= 0) break;
      const back = Math.min(left, h.slots);
      left -= back;
      if (back === h.slots) this.remove(c.key, p, k, h);
      else {
        h.slots -= back;
        p.held -= back;
      }
    }
  }

  /** Drops the pools whose every lease has ended (at most once a second). */
  sweep(nowMs: number): void {
    if (nowMs < this.nextSweepMs) return;
    this.nextSweepMs = nowMs + 1000;
    for (const [second, keys] of this.expiries) {
      if (second * 1000 > nowMs) continue;
      for (const k of keys) {
        const p = this.pools.get(k);
        if (!p) continue;
        this.total -= p.holders.size;
        this.bySize.resized(k, p.holders.size, 0);
        this.pools.delete(k);
      }
      this.expiries.delete(second);
    }
  }

  /** Pools and holders kept, for tests of the bounds. */
  get size(): { pools: number; holders: number } {
    return { pools: this.pools.size, holders: this.total };
  }

  clear(): void {
    this.pools.clear();
    this.expiries.clear();
    this.bySize.clear();
    this.total = 0;
  }

  /** Removes a holder; the pool goes with its last one (`drop`), so a pool costs memory only while held. */
  private remove(key: string, p: Pool, id: string, h: Holder, drop = true): void {
    p.holders.delete(id);
    this.bySize.resized(key, p.holders.size + 1, p.holders.size);
    p.held -= h.slots;
    this.total--;
    if (!drop || p.holders.size > 0) return;
    this.pools.delete(key);
    const bucket = this.expiries.get(Math.ceil(p.untilMs / 1000));
    bucket?.delete(key);
    if (bucket?.size === 0) this.expiries.delete(Math.ceil(p.untilMs / 1000));
  }

  private expireAt(key: string, p: Pool, untilMs: number): void {
    this.expiries.get(Math.ceil(p.untilMs / 1000))?.delete(key);
    p.untilMs = untilMs;
    const second = Math.ceil(untilMs / 1000);
    const bucket = this.expiries.get(second);
    if (bucket) bucket.add(key);
    else this.expiries.set(second, new Set([key]));
  }
}

/** A pool's holders by when their leases end, as slots.lua's sorted set orders them: count-mode give-backs
 * return the soonest ending first, and ended leases end in that order. The order they took their slots, unless a
 * shorter lease came later (a reload): then sorted, which only such a pool pays for. */
function leaseOrder(p: Pool): Iterable<[string, Holder]> {
  return p.ordered ? p.holders : [...p.holders].sort((a, b) => a[1].untilMs - b[1].untilMs);
}
