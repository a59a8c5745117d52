import type { Clock } from '../counters/clock.js';
import type { MemorySlots } from './memory-slots.js';
import { type HeldSlot, MAX_PEER_SLOTS, type Renewal, type SlotLeases } from './store.js';

/** Entries kept in all peers' lists, at most: a list entry outlives its slot until a renewal finds it gone, so
 * the lists are bounded apart from the slots. */
const MAX_LISTED = 100_000;

/** The memory store's lists of renewed slots (store.ts SlotLeases), per peer: what redis-slot-leases.ts keeps
 * in Redis, for the one replica that holds the slots. A list nobody renews goes with its last entry's end. */
export class MemorySlotLeases implements SlotLeases {
  private readonly lists = new Map<string, Map<string, HeldSlot>>();
  private listed = 0;
  private nextSweepMs = 0;

  constructor(
    private readonly slots: MemorySlots,
    private readonly clock: Clock,
  ) {}

  note(peer: string, held: readonly HeldSlot[]): Promise<number> {
    this.sweep();
    const list = this.lists.get(peer) ?? new Map<string, HeldSlot>();
    this.lists.set(peer, list);
    let left = 0;
    for (const h of held) {
      const field = `${h.key}\n${h.id}`;
      if (!list.has(field) && (list.size >= MAX_PEER_SLOTS || this.listed >= MAX_LISTED)) left++;
      else {
        if (!list.has(field)) this.listed++;
        list.set(field, h);
      }
    }
    if (list.size === 0) this.lists.delete(peer);
    return Promise.resolve(left);
  }

  renew(peer: string): Promise<Renewal> {
    const list = this.lists.get(peer);
    const out = { renewed: 0, dropped: 0 };
    if (!list) return Promise.resolve(out);
    const now = this.clock.now();
    for (const [field, h] of list) {
      if (now < h.endMs && this.slots.renew(h.key, h.id, Math.min(now + h.leaseMs, h.endMs), now)) out.renewed++;
      else {
        list.delete(field);
        this.listed--;
        out.dropped++;
      }
    }
    if (list.size === 0) this.lists.delete(peer);
    return Promise.resolve(out);
  }

  move(from: string, to: string): Promise<number> {
    const list = this.lists.get(from);
    if (!list) return Promise.resolve(0);
    this.lists.delete(from);
    this.listed -= list.size;
    return this.note(to, [...list.values()]);
  }

  /** At the bound, at most once a second: entries past their end or whose slots are gone (a list nobody
   * renews, its Envoy gone). What is left is of slots held, which the slots' own bound keeps below this one. */
  private sweep(): void {
    const now = this.clock.now();
    if (this.listed < MAX_LISTED || now < this.nextSweepMs) return;
    this.nextSweepMs = now + 1000;
    for (const [peer, list] of this.lists) {
      for (const [field, h] of list) {
        if (h.endMs > now && this.slots.renew(h.key, h.id, 0, now)) continue;
        list.delete(field);
        this.listed--;
      }
      if (list.size === 0) this.lists.delete(peer);
    }
  }
}
