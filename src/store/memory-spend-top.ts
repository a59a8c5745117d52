import { windowBounds } from '../counters/calendar.js';
import type { Clock } from '../counters/clock.js';
import { hashTag, windowKeyParts } from '../counters/keys.js';
import type { CounterCheck } from '../limits/check.js';
import { ALGORITHMS } from '../limits/kinds/index.js';
import { fullestFirst, MAX_SPEND_LISTED, type SpendPage, type SpendTop, type SpendWindow } from './spend-top.js';

/** Lists kept at once, at most (a rule has one per window, two for a moment at a window's turn): past it, lists
 * whose window ended go first, and a new one is not kept until one does. */
const MAX_LISTS = 10_000;

/** One window's list: counter tag → share, until the window ends; `least` and `leastKey`, the least full (least
 * -1: not known). */
interface List {
  untilMs: number;
  shares: Map<string, number>;
  least: number;
  leastKey: string;
}

/** The memory store's spend lists (spend-top.ts), written by its charges as lua/spend-top.lua writes Redis's:
 * the counter's share after the charge, the least full leaving a list at its bound. */
export class MemorySpendTop implements SpendTop {
  private readonly lists = new Map<string, List>();

  constructor(private readonly clock: Clock) {}

  /** A charged check's counter, holding `used` (its kind's measure) after the charge, at `nowMs`. */
  note(c: CounterCheck, used: number, nowMs: number): void {
    const a = ALGORITHMS[c.kind]!;
    const { counterId, windowName } = windowKeyParts(c.key);
    const w = { counterId, windowName, windowMs: c.windowMs, calendar: c.calendar, refills: a.refills };
    const name = listName(w, nowMs);
    let list = this.lists.get(name);
    if (!list) {
      if (this.lists.size >= MAX_LISTS) this.sweep(nowMs);
      if (this.lists.size >= MAX_LISTS) return;
      list = { untilMs: 0, shares: new Map(), least: -1, leastKey: '' };
      this.lists.set(name, list);
    }
    // A bucket's list lasts as long as its fullest counter could take to refill; a window's, to its end.
    list.untilMs = a.refills ? Math.max(list.untilMs, nowMs + (c.burst * c.windowMs) / c.limit) : windowBounds(nowMs, c.windowMs, c.calendar).endMs;
    put(list, hashTag(c.key), a.share(c, used));
  }

  read(w: SpendWindow, offset: number, count: number): Promise<SpendPage> {
    const list = this.lists.get(listName(w, this.clock.now()));
    const all = list ? [...list.shares].map(([counter, share]) => ({ counter, share })) : [];
    return Promise.resolve({ listed: all.length, counters: fullestFirst([all], offset, count) });
  }

  private sweep(nowMs: number): void {
    for (const [name, list] of this.lists) if (list.untilMs <= nowMs) this.lists.delete(name);
  }
}

/** A window's list at a time: the rule, the window, and the window's index (a bucket has one list). */
function listName(w: SpendWindow, nowMs: number): string {
  const index = w.refills ? 0 : windowBounds(nowMs, w.windowMs, w.calendar).index;
  return `${w.counterId}:${w.windowName}:${index}`;
}

/** A counter's share; at the bound, the least full leaves (the new one itself if it is least; ties: the lower
 * tag), as ZADD then ZPOPMIN does in Redis. The least is kept while known, so a full list's usual insert, one
 * less full than every listed counter, costs no scan. */
function put(list: List, counter: string, share: number): void {
  const had = list.shares.has(counter);
  if (had || list.shares.size < MAX_SPEND_LISTED) {
    list.shares.set(counter, share);
    if (list.least >= 0 && below(share, counter, list)) {
      list.least = share;
      list.leastKey = counter;
    } else if (had && counter === list.leastKey) list.least = -1; // the least grew: unknown until needed
    return;
  }
  if (list.least < 0) leastOf(list);
  if (below(share, counter, list)) return;
  list.shares.delete(list.leastKey);
  list.shares.set(counter, share);
  list.least = -1;
}

const below = (share: number, counter: string, list: List): boolean => share < list.least || (share === list.least && counter < list.leastKey);

function leastOf(list: List): void {
  list.least = Infinity;
  for (const [k, s] of list.shares) {
    if (s < list.least || (s === list.least && k < list.leastKey)) {
      list.least = s;
      list.leastKey = k;
    }
  }
}
