import { performance } from 'node:perf_hooks';
import type { Logger } from 'pino';

/** Gives a grown V8 heap back to the operating system once the process is quiet, as the JVM's G1 does with its
 * periodic collection (JEP 346): a burst (a flood of invented tenants, a replayed queue) grows the heap to what
 * the burst allocated, and V8 keeps those pages for ever after; nothing else would shrink it, since a quiet
 * process makes no garbage and so runs no collection.
 *
 * Measured (2026-12-02, memory store, 20 s of 64-take in-flight calls from invented tenants, ~300,000 takes):
 * RSS 100 → 340 MiB, unchanged after 30 s quiet; a regular full GC took the heap from 170 to 100 MB and RSS not
 * at all (the freed pages stay mapped); V8's last-resort collection (the one a low-memory notification runs:
 * compaction, then the free pages unmapped) took RSS to 142–148 MiB. Its pause, asked for as `async`: ~5 ms on
 * Node 22.23, ~220 ms on Node 24.21 (V8 runs it in one go there). That pause is why it runs only when no call
 * at all came over the last look and the event loop was all but idle, at most once every TICKS_BETWEEN looks,
 * and only when RSS grew by GROWTH_BYTES past where the last trim (or the start) left it: a heap grown by live
 * state (a million counters held) is trimmed once, not again and again. A replica under steady traffic is never
 * quiet and keeps its heap, as it would anyway: the next burst reuses it. */

/** RSS growth past the floor that is worth a collection. */
export const GROWTH_BYTES = 64 * 1024 * 1024;
/** Event-loop utilization at or under which a look with no call counts as quiet (the port's 5 ms heartbeat,
 * server/reset-guard.ts, is ~2 % of an idle replica's loop): no reload, RLQS report or scrape at work. */
export const IDLE_UTILIZATION = 0.05;
/** Looks between two trims, so a client alternating bursts and pauses gets one pause per this many looks. */
export const TICKS_BETWEEN = 4;

/** When to trim, from what each look sees: RSS in bytes, the event loop's utilization since the last look and
 * whether any call came meanwhile. */
export class TrimPolicy {
  private floor: number | undefined;
  private sinceTrim = TICKS_BETWEEN;

  /** Whether to trim now. */
  look(rss: number, utilization: number, called = false): boolean {
    this.sinceTrim++;
    // The first look, and the first after a trim (RSS as the trim left it), set the floor; so does a lower RSS.
    if (this.floor === undefined || this.sinceTrim === 1 || rss < this.floor) this.floor = rss;
    const quiet = !called && utilization <= IDLE_UTILIZATION;
    if (this.sinceTrim < TICKS_BETWEEN || !quiet || rss - this.floor < GROWTH_BYTES) return false;
    this.sinceTrim = 0;
    return true;
  }
}

/** V8's gc() under --expose-gc (heap-flags.ts adds it to `serve`), with the options V8 reads. */
type Gc = (options?: { type: 'major'; execution: 'async' | 'sync'; flavor: 'last-resort' | 'regular' }) => void;

export interface HeapTrim {
  /** Trims run since start. */
  readonly trims: number;
  stop(): void;
}

/** Looks every `intervalMs` (0: never); `calls` counts the calls come since start. Does nothing without V8's
 * gc() (an operator's --no-expose-gc). */
export function startHeapTrim(intervalMs: number, deps: { logger: Pick<Logger, 'info'>; calls: () => number }, gc = (globalThis as { gc?: Gc }).gc): HeapTrim {
  const state = { trims: 0, stop: () => undefined };
  if (intervalMs === 0 || typeof gc !== 'function') return state;
  const { logger, calls } = deps;
  const policy = new TrimPolicy();
  let last = performance.eventLoopUtilization();
  let lastCalls = calls();
  const timer = setInterval(() => {
    const now = performance.eventLoopUtilization();
    const utilization = performance.eventLoopUtilization(now, last).utilization;
    last = now;
    const seen = calls();
    const called = seen !== lastCalls;
    lastCalls = seen;
    const rss = process.memoryUsage.rss();
    if (!policy.look(rss, utilization, called)) return;
    state.trims++;
    logger.info({ rssMb: Math.round(rss / 2 ** 20) }, 'quiet with a grown heap: giving it back to the system (one full collection)');
    gc({ type: 'major', execution: 'async', flavor: 'last-resort' });
  }, intervalMs);
  timer.unref();
  return Object.assign(state, { stop: () => clearInterval(timer) });
}
