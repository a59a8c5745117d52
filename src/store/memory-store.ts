import type { Logger } from 'pino';
import { systemClock, type Clock } from '../limiter/clock.js';
import { hasRoom, slidingUsed, windowStartMs } from '../limiter/window.js';
import { settle, type CheckResult, type CounterCheck, type CounterWindow, type Store, type StoreHealth } from './store.js';

export interface MemoryStoreOptions {
  clock?: Clock;
  /** Most counters kept at once. When reached, expired windows are reclaimed first, then the oldest
   * counters are evicted (they restart from zero, so a client may get more than its limit); each eviction
   * is counted and logged. */
  maxCounters?: number;
  logger?: Pick<Logger, 'warn'>;
}

const defaults = {
  maxCounters: 1_000_000,
};

/** Counters in this process. Exact under concurrency because a check runs to completion on the event loop
 * before the next starts. */
export class MemoryStore implements Store {
  readonly kind = 'memory';
  private readonly counts = new Map<string, number>();
  /** Keys by expiry time: windows end on shared boundaries, so there are few buckets and reclaiming is
   * proportional to what expired, not to the number of counters. */
  private readonly expiries = new Map<number, string[]>();
  private readonly clock: Clock;
  private readonly maxCounters: number;
  private nextSweepMs = 0;
  private lastEvictionLogMs = 0;
  evictions = 0;

  constructor(private readonly opts: MemoryStoreOptions = {}) {
    this.clock = opts.clock ?? systemClock;
    this.maxCounters = opts.maxCounters ?? defaults.maxCounters;
  }

  get size(): number {
    return this.counts.size;
  }

  check(checks: readonly CounterCheck[]): Promise<CheckResult> {
    const nowMs = this.clock.now();
    if (nowMs >= this.nextSweepMs) this.sweep(nowMs);
    const n = checks.length;
    const curr = new Array<number>(n);
    const prev = new Array<number>(n);
    const over = new Array<boolean>(n);
    for (let i = 0; i < n; i++) {
      const c = checks[i]!;
      const start = windowStartMs(nowMs, c.windowMs);
      curr[i] = this.counts.get(`${c.key}:${start}`) ?? 0;
      prev[i] = c.sliding ? (this.counts.get(`${c.key}:${start - c.windowMs}`) ?? 0) : 0;
      const used = c.sliding ? slidingUsed(prev[i]!, curr[i]!, nowMs, c.windowMs) : curr[i]!;
      over[i] = !hasRoom(used, c.hits, c.limit);
    }
    const { admitted, groupOver } = settle(checks, over);
    if (admitted) {
      for (let i = 0; i < n; i++) {
        const c = checks[i]!;
        if (c.hits === 0 || groupOver[c.group]) continue;
        const start = windowStartMs(nowMs, c.windowMs);
        // A sliding window's count is still read as "previous" during the next window.
        this.add(`${c.key}:${start}`, c.hits, start + c.windowMs * (c.sliding ? 2 : 1), nowMs);
      }
    }
    return Promise.resolve({ nowMs, admitted, curr, prev, over });
  }

  health(): StoreHealth {
    return { degraded: false, reason: undefined };
  }

  reset(windows: readonly CounterWindow[]): Promise<number> {
    const start = (w: CounterWindow): number => windowStartMs(this.clock.now(), w.windowMs);
    let removed = 0;
    for (const w of windows) {
      if (this.counts.delete(`${w.key}:${start(w)}`)) removed++;
      if (this.counts.delete(`${w.key}:${start(w) - w.windowMs}`)) removed++;
    }
    return Promise.resolve(removed);
  }

  /** Current count of a window, for inspection and tests. */
  peek(key: string, windowMs: number): number {
    return this.counts.get(`${key}:${windowStartMs(this.clock.now(), windowMs)}`) ?? 0;
  }

  close(): Promise<void> {
    this.counts.clear();
    this.expiries.clear();
    return Promise.resolve();
  }

  private add(key: string, hits: number, expiresAtMs: number, nowMs: number): void {
    const current = this.counts.get(key);
    if (current !== undefined) {
      this.counts.set(key, current + hits);
      return;
    }
    if (this.counts.size >= this.maxCounters) this.makeRoom(nowMs);
    this.counts.set(key, hits);
    const bucket = this.expiries.get(expiresAtMs);
    if (bucket) bucket.push(key);
    else this.expiries.set(expiresAtMs, [key]);
  }

  private sweep(nowMs: number): void {
    this.nextSweepMs = nowMs + 1000;
    for (const [expiresAtMs, keys] of this.expiries) {
      if (expiresAtMs > nowMs) continue;
      for (const k of keys) this.counts.delete(k);
      this.expiries.delete(expiresAtMs);
    }
  }

  private makeRoom(nowMs: number): void {
    this.sweep(nowMs);
    if (this.counts.size < this.maxCounters) return;
    // Map iteration order is insertion order: the first key is the oldest counter.
    const oldest = this.counts.keys().next().value as string;
    this.counts.delete(oldest);
    this.evictions++;
    if (nowMs - this.lastEvictionLogMs >= 60_000) {
      this.lastEvictionLogMs = nowMs;
      this.opts.logger?.warn({ maxCounters: this.maxCounters, evictions: this.evictions }, 'memory store full: evicting oldest counters');
    }
  }
}
