import type { CompiledLimit } from '../config/compiled.js';
import { windowKeyParts } from '../counters/keys.js';
import type { CounterCheck } from '../limits/check.js';
import { ALGORITHMS } from '../limits/kinds/index.js';

/** Who is nearest their budget (issue 62, docs/spend.md): each window of a charge_mode rule lists its counters by
 * the share of their own limit they have used (a tier's for a client in one), kept by the store in the same step
 * as the charge (memory-spend-top.ts; lua/spend-top.lua for Redis), so what a list says is what the counters
 * hold, whichever replica charged them. A list keeps the MAX_SPEND_LISTED fullest: a counter whose share only
 * grows (charges) is in it exactly when it is among them. */

/** Counters one list keeps, at most: the fullest. lua/spend-top.lua's MAX_TOP says the same. */
export const MAX_SPEND_LISTED = 1000;

/** A window of a rule, as its lists are named: the rule's counter id, the window's name, length and alignment. */
export interface SpendWindow {
  counterId: string;
  windowName: string;
  windowMs: number;
  calendar: number;
  /** Its kind refills (a bucket): one list, no window index. */
  refills: boolean;
}

/** The window of a rule's limit as its lists are named: by the name its checks' keys carry (a bucket's is its
 * own, counters/keys.ts bucketKey). */
export function spendWindowOf(counterId: string, l: CompiledLimit): SpendWindow {
  const a = ALGORITHMS[l.kind]!;
  const { windowName } = windowKeyParts(a.storeKey(`{${counterId}}`, l.windowName));
  return { counterId, windowName, windowMs: l.windowSeconds * 1000, calendar: l.calendar, refills: a.refills };
}

/** A listed counter: its hash tag (the fingerprints of the values that make it), and its share (1 = at its
 * limit; more when a charge took it past). */
export interface SpendCounter {
  counter: string;
  share: number;
}

/** One window's list, fullest first, from `offset`; `listed`: how many it holds in all. */
export interface SpendPage {
  listed: number;
  counters: SpendCounter[];
}

export interface SpendTop {
  /** The current window's counters nearest their limit, `count` of them from `offset` (both bounded by the list). */
  read(w: SpendWindow, offset: number, count: number): Promise<SpendPage>;
}

/** Whether a check's counter is listed: a count on a window of a rule the config made charge_mode (not Envoy's
 * own limit on it, whose limit the request sets; not a refund; not slots), not shadow (it refuses nobody). The
 * one place that says it, for both stores. */
export function spendListed(c: CounterCheck): boolean {
  return c.spend === true && !c.shadow;
}

/** The fullest first, ties by counter (as Redis's ZREVRANGE orders them), over lists of several masters. */
export function fullestFirst(lists: readonly SpendCounter[][], offset: number, count: number): SpendCounter[] {
  const all = lists.flat();
  all.sort((a, b) => b.share - a.share || (a.counter < b.counter ? 1 : a.counter > b.counter ? -1 : 0));
  return all.slice(offset, offset + count);
}
