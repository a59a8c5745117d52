import { StoreKeyError, StoreUnavailableError } from '../errors.js';
import type { CounterCheck } from '../limits/check.js';
import { SizeIndex } from './size-index.js';
import type { Store } from './store.js';

/** Most descriptors (checks) kept while the shared store does not answer, in all and per counter: a call is
 * counted by what it holds, so 64 give-backs in one call weigh 64. Past its counter's bound a call is dropped
 * (counted); at the bound in all, the oldest call of the counter holding the most is dropped to make room, so a
 * client that invents tenants to fill the queue never pushes out another tenant's settlements. A kept check costs 0.4–0.7 KB (373 B
 * measured alone with 40-character keys, 2026-12-02; ~0.7 KB as the service holds them), so the whole queue
 * stays under ~7 MiB, where 10,000 calls of 64 once held 433 MiB. */
export const MAX_WAITING_CHECKS = 10_000;
export const MAX_WAITING_PER_COUNTER = 1_000;
/** How many checks are sent at once when the store answers again, and the pause between two such slices: a
 * replay of the whole queue takes ~40 slices, and live calls go between them, never behind 10,000. */
const SEND_AT_ONCE = 256;
const SLICE_GAP_MS = 5;

/** Stream-end settlements (a settlement_key's calls) and in-flight give-backs by request id that the shared
 * store could not take, frozen or unreachable, kept and sent again once it answers: Envoy ignores the answer
 * of that call, so without this the tokens it reports would never reach the budget, and the slot would stay
 * held until its lease. Sending one twice is safe: each names what it ends, and the second finds it ended and
 * counts nothing (a frozen Redis that wakes runs what was sent to it before the timeout, and then the retry
 * finds it done). Plain charges and count-mode give-backs are not kept: nothing tells a retry whether a frozen
 * Redis ran the first. */
export class SettlementQueue {
  private waiting: CounterCheck[][] = [];
  /** Checks held, in all and by counter (counterOf); each counter's calls, oldest first. */
  private checks = 0;
  private calls = 0;
  private readonly perCounter = new Map<string, number>();
  private readonly ofCounter = new Map<string, CounterCheck[][]>();
  private readonly bySize = new SizeIndex();
  /** Calls dropped to make room, still in `waiting` until it is compacted (`stale` of them). */
  private readonly evicted = new WeakSet<CounterCheck[]>();
  private stale = 0;
  /** Settlements dropped at a bound, or refused by the store for their own keys, since start. */
  dropped = 0;
  private timer: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(
    private readonly store: Pick<Store, 'check'>,
    private readonly retryMs = 1000,
  ) {}

  /** Calls kept. */
  get size(): number {
    return this.calls;
  }

  /** Checks (descriptors) kept: what the bounds count. */
  get held(): number {
    return this.checks;
  }

  /** Whether a request only settles or gives back by id, the kinds this keeps: each names what it ends (a
   * reservation, or the slots a request id holds), so sending it twice ends it once. A count-mode give-back
   * (no id) is not kept: a retry cannot know whether the first ran. */
  static holds(checks: readonly CounterCheck[]): boolean {
    return checks.length > 0 && checks.every((c) => c.reservation?.settles === true || (c.op === 'giveBack' && c.hits > 0 && c.slots?.id !== undefined));
  }

  /** The give-back of a request's takes of slots by request id, undefined when it takes none: what is kept for
   * a take whose answer never came (failure-policy.ts). */
  static giveBackOf(checks: readonly CounterCheck[]): CounterCheck[] | undefined {
    const takes = checks.filter((c) => c.op === 'take' && c.hits > 0 && c.slots?.id !== undefined);
    return takes.length > 0 ? takes.map((c) => ({ ...c, op: 'giveBack' })) : undefined;
  }

  /** Keeps a settlement or give-back the store failed to take; false when a bound dropped it. */
  keep(checks: readonly CounterCheck[]): boolean {
    const counter = counterOf(checks);
    const held = this.perCounter.get(counter) ?? 0;
    if (this.closed || checks.length > MAX_WAITING_PER_COUNTER || held + checks.length > MAX_WAITING_PER_COUNTER) {
      this.dropped++;
      return false;
    }
    while (this.checks + checks.length > MAX_WAITING_CHECKS) this.evictOne();
    const entry = [...checks];
    this.waiting.push(entry);
    const list = this.ofCounter.get(counter);
    if (list) list.push(entry);
    else this.ofCounter.set(counter, [entry]);
    this.counted(entry, 1);
    this.schedule();
    return true;
  }

  /** Drops the oldest call of the counter holding the most checks (counted as dropped). */
  private evictOne(): void {
    const entry = this.ofCounter.get(this.bySize.largest()!)![0]!;
    this.evicted.add(entry);
    this.release(entry);
    this.dropped++;
    // What a dropped call holds goes once as many are dropped as kept, not at the next send: a flood while the
    // store is away never makes `waiting` hold more than twice the bound.
    if (++this.stale > this.calls) this.compact();
  }

  /** Takes the calls dropped to make room out of `waiting`. */
  private compact(): void {
    this.waiting = this.waiting.filter((e) => !this.evicted.has(e));
    this.stale = 0;
  }

  /** Adds (1) or takes away (-1) a call's checks from the counts and the index. */
  private counted(entry: CounterCheck[], sign: 1 | -1): void {
    const counter = counterOf(entry);
    const before = this.perCounter.get(counter) ?? 0;
    const after = before + sign * entry.length;
    if (after <= 0) this.perCounter.delete(counter);
    else this.perCounter.set(counter, after);
    this.bySize.resized(counter, before, after);
    this.checks += sign * entry.length;
    this.calls += sign;
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
  }

  private schedule(): void {
    if (this.timer || this.closed) return;
    this.timer = setTimeout(() => void this.send(), this.retryMs);
    this.timer.unref();
  }

  /** Sends what waits, oldest first, a slice of at most SEND_AT_ONCE checks at a time with a pause between
   * (live calls go first); stops at the first sign the store is still away. */
  private async send(): Promise<void> {
    this.timer = undefined;
    while (!this.closed) {
      const slice = this.nextSlice();
      if (slice.length === 0) break;
      const results = await Promise.allSettled(slice.map(async (checks) => this.store.check(checks)));
      let done = 0;
      for (const r of results) {
        const away = r.status === 'rejected' && r.reason instanceof StoreUnavailableError && !(r.reason instanceof StoreKeyError);
        if (away) break;
        if (r.status === 'rejected') this.dropped++;
        done++;
      }
      // The slice is still the head of `waiting` (a compaction meanwhile only took dropped calls out of it).
      const sent = new Set(slice.slice(0, done));
      let k = 0;
      while (k < this.waiting.length && sent.has(this.waiting[k]!)) k++;
      this.waiting.splice(0, k);
      for (const checks of sent) this.release(checks);
      if (done < slice.length) break;
      if (this.waiting.length > 0) await new Promise((resolve) => setTimeout(resolve, SLICE_GAP_MS));
    }
    if (this.calls > 0) this.schedule();
  }

  /** The oldest calls that hold at most SEND_AT_ONCE checks together (at least one call), those dropped to make
   * room left out of `waiting` first. */
  private nextSlice(): CounterCheck[][] {
    if (this.stale > 0) this.compact();
    let n = 0;
    let end = 0;
    while (end < this.waiting.length && (end === 0 || n + this.waiting[end]!.length <= SEND_AT_ONCE)) n += this.waiting[end++]!.length;
    return this.waiting.slice(0, end);
  }

  /** A call sent or dropped: out of the counts and its counter's list (`waiting` lets go of it as a send passes). */
  private release(entry: CounterCheck[]): void {
    const counter = counterOf(entry);
    const list = this.ofCounter.get(counter);
    const at = list ? list.indexOf(entry) : -1;
    if (at < 0) return;
    list!.splice(at, 1);
    if (list!.length === 0) this.ofCounter.delete(counter);
    this.counted(entry, -1);
  }
}

/** The counter a kept request is bounded by: its reservation's, or its slots'. */
function counterOf(checks: readonly CounterCheck[]): string {
  return checks[0]!.reservation?.key ?? checks[0]!.key;
}
