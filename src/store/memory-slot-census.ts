import type { Clock } from '../counters/clock.js';
import { nearestLimit } from './census-top.js';
import type { MemorySlots } from './memory-slots.js';
import { type Census, type CensusCounter, MAX_CENSUS, MAX_LISTED, type SlotCensus } from './store.js';

/** The memory store's census (store.ts SlotCensus): per rule, its counters that took slots and their limits.
 * Bounded by the slots' own bound: a counter is listed only while it holds slots (a census drops the rest),
 * and listed again by its next take. */
export class MemorySlotCensus implements SlotCensus {
  private readonly rules = new Map<string, Map<string, number>>();

  constructor(
    private readonly slots: MemorySlots,
    private readonly clock: Clock,
  ) {}

  note(rule: string, key: string, limit: number): Promise<void> {
    const list = this.rules.get(rule) ?? new Map<string, number>();
    this.rules.set(rule, list);
    if (list.size < MAX_LISTED || list.has(key)) list.set(key, limit);
    return Promise.resolve();
  }

  retain(rules: readonly string[]): void {
    const keep = new Set(rules);
    for (const rule of this.rules.keys()) if (!keep.has(rule)) this.rules.delete(rule);
  }

  count(rule: string, top: number): Promise<Census> {
    const list = this.rules.get(rule);
    const out: Census = { held: 0, expired: 0, counters: 0, partial: false, top: [] };
    if (!list) return Promise.resolve(out);
    const now = this.clock.now();
    const found: CensusCounter[] = [];
    for (const [key, limit] of list) {
      if (out.counters === MAX_CENSUS) {
        out.partial = true;
        break;
      }
      const [held, expired] = this.slots.held({ key, slots: undefined }, now);
      out.counters++;
      out.expired += expired;
      out.held += held;
      if (held > 0) found.push({ key, held, limit });
      else list.delete(key);
    }
    if (list.size === 0) this.rules.delete(rule);
    out.top = nearestLimit(found, top);
    return Promise.resolve(out);
  }
}
