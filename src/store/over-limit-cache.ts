import { type Clock, systemClock } from '../counters/clock.js';
import { type CheckResult, type CounterCheck, type CounterWindow, givesBack } from '../limits/check.js';
import { ALGORITHMS } from '../limits/kinds/index.js';
import type { Maybe, Store, StoreHealth, TraceLink } from './store.js';

interface Snapshot {
  key: string;
  windowMs: number;
  /** Window start; a bucket: the store time its debt (curr) was read at. */
  start: number;
  curr: number;
  prev: number;
}

interface Entry {
  /** Local time until which the window stays full. */
  untilMs: number;
  /** The limit (and burst) it is full for: a raised limit (tier, reload) makes the entry useless. */
  limit: number;
  burst: number;
  /** The hits the wait was computed for: a smaller request may fit sooner, so only as many or more are
   * answered from the entry. */
  hits: number;
  /** Store clock minus local clock, to report resets in the store's time. */
  offsetMs: number;
  /** The other windows of the same descriptor, as last seen, for the statuses. */
  group: Snapshot[];
}

const MAX_ENTRIES = 100_000;

/** Answers requests whose every descriptor has a window known to be full, without asking the store.
 * Exact, because rejected requests never count: once a window is full it stays full until it ends (fixed)
 * or has decayed enough (sliding), and a token bucket stays short of the request's tokens until they have
 * refilled (its debt only grows by others' requests), whatever other replicas do. Two things give room back, and
 * each says so: a refund (is_negative_hits), and a refused request over several Cluster masters whose admitted
 * parts counted for a moment (CheckResult.givenBack); both make every replica forget the windows. */
export class OverLimitCache implements Store {
  readonly kind: string;
  private readonly entries = new Map<string, Entry>();

  constructor(
    private readonly inner: Store,
    private readonly clock: Clock = systemClock,
  ) {
    this.kind = inner.kind;
  }

  /** A request blocked by a window known to be full is answered at once, without the store. */
  /** Told of windows a refund gave something back to: other replicas must forget them too (service.ts). */
  onRefund: ((keys: string[]) => void) | undefined;

  check(checks: readonly CounterCheck[], trace?: TraceLink): Maybe<CheckResult> {
    const sentAt = this.clock.now();
    // A refund (Envoy 1.38's is_negative_hits) makes room: a window known full may not be any more.
    if (this.entries.size > 0) for (const c of checks) if (givesBack(c)) this.entries.delete(c.key);
    const cached = this.answer(checks, sentAt);
    if (cached) return cached;
    const result = this.inner.check(checks, trace);
    if (result instanceof Promise) return result.then((r) => this.learn(checks, r, sentAt));
    return this.learn(checks, result, sentAt);
  }

  private learn(checks: readonly CounterCheck[], result: CheckResult, sentAt: number): CheckResult {
    if (this.onRefund && result.counted) this.announceRefunds(checks, result.counted);
    // A request with a charge is never answered from here (see answer): nothing of it to remember.
    if (!result.admitted && result.source === undefined && !result.counted) this.remember(checks, result, sentAt);
    if (result.givenBack?.length) {
      // Counted for a moment and given back: a request refused meanwhile may have left them here as full, on this
      // replica or another.
      this.forget(result.givenBack);
      this.onRefund?.(result.givenBack);
    }
    return result;
  }

  private announceRefunds(checks: readonly CounterCheck[], counted: readonly number[]): void {
    // Slots are never cached (answer, remember): a give-back needs no announcement.
    const keys = checks.filter((c, i) => c.op === 'refund' && counted[i]! < 0).map((c) => c.key);
    if (keys.length > 0) this.onRefund!(keys);
  }

  get size(): number {
    return this.entries.size;
  }

  health(): StoreHealth {
    return this.inner.health();
  }

  /** Forget everything (config reloaded). */
  clear(): void {
    this.entries.clear();
  }

  /** Forget these windows: their counters were reset, here or by another replica. */
  forget(keys: readonly string[]): void {
    for (const k of keys) this.entries.delete(k);
  }

  reset(windows: readonly CounterWindow[]): Promise<number> {
    this.forget(windows.map((w) => w.key));
    return this.inner.reset(windows);
  }

  close(): Promise<void> {
    this.entries.clear();
    return this.inner.close();
  }

  private answer(checks: readonly CounterCheck[], now: number): CheckResult | undefined {
    // Nothing known full (traffic under its limits): no key looked up, nothing allocated.
    if (this.entries.size === 0) return undefined;
    // Every descriptor must be enforced and blocked by a cached full window; otherwise ask the store.
    const blocked: (Entry | undefined)[] = [];
    for (const c of checks) {
      // A charge must be counted, and a reservation recorded: only the store can answer them.
      if (c.shadow || c.charge || ALGORITHMS[c.kind]!.slots) return undefined;
      const e = this.entries.get(c.key);
      if (e && valid(e, c, now)) blocked[c.group] = e;
    }
    for (const c of checks) if (!blocked[c.group]) return undefined;
    const first = blocked[checks[0]!.group]!;
    const nowMs = now + first.offsetMs;
    const n = checks.length;
    const result: CheckResult = { nowMs, admitted: false, curr: new Array(n), prev: new Array(n), over: new Array(n), source: 'cache' };
    checks.forEach((c, i) => {
      const e = this.entries.get(c.key);
      const full = e !== undefined && valid(e, c, now);
      const seen = blocked[c.group]!.group.find((s) => s.key === c.key);
      [result.curr[i], result.prev[i]] = ALGORITHMS[c.kind]!.fromCache(c, seen, full, nowMs);
      result.over[i] = full;
    });
    return result;
  }

  private remember(checks: readonly CounterCheck[], r: CheckResult, sentAt: number): void {
    if (this.entries.size >= MAX_ENTRIES) this.entries.clear();
    checks.forEach((c, i) => {
      if (!r.over[i] || c.shadow || ALGORITHMS[c.kind]!.slots) return;
      const group: Snapshot[] = [];
      checks.forEach((o, j) => {
        const start = ALGORITHMS[o.kind]!.spanStartMs(o, r.nowMs);
        if (o.group === c.group) group.push({ key: o.key, windowMs: o.windowMs, start, curr: r.curr[j]!, prev: r.prev[j]! });
      });
      const wait = ALGORITHMS[c.kind]!.waitMs(c, r.curr[i]!, r.prev[i]!, r.nowMs);
      // From the send time: the store's "now" was no earlier, so the entry never outlives the real window.
      this.entries.set(c.key, {
        untilMs: sentAt + wait,
        limit: c.limit,
        burst: c.burst,
        hits: Math.max(c.hits, 1),
        offsetMs: r.nowMs - sentAt,
        group,
      });
    });
  }
}

/** An entry still answers for this check: not expired, same limit and burst, and no smaller a request. */
function valid(e: Entry, c: CounterCheck, now: number): boolean {
  return e.untilMs > now && e.limit === c.limit && e.burst === c.burst && Math.max(c.hits, 1) >= e.hits;
}
