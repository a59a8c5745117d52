import { MAX_BATCH_KEYS } from '../store/batch-queues.js';
import { parseGoDuration, SettingsError } from './compat.js';
import { LEVEL_ALIASES, LOG_LEVELS, type LogLevel, type Setting } from './table.js';

/** How one setting's text becomes a value: each error names where the text came from (flag or variable). */

/** The kinds of number a setting can be, and how an error names them. */
export const NUMBERS = {
  positive: { ok: (n: number) => Number.isInteger(n) && n > 0, what: 'a positive whole number' },
  whole: { ok: (n: number) => Number.isInteger(n) && n >= 0, what: 'a whole number' },
  port: { ok: (n: number) => Number.isInteger(n) && n >= 0 && n <= 65535, what: 'a port number 0-65535' },
  ratio: { ok: (n: number) => n > 0 && n <= 1, what: 'a number above 0 and at most 1' },
  share: { ok: (n: number) => n >= 0 && n <= 1, what: 'a number from 0 to 1' },
  portion: { ok: (n: number) => n > 0 && n <= 1, what: 'a number above 0, at most 1' },
  above0: { ok: (n: number) => Number.isFinite(n) && n > 0, what: 'a number above 0' },
  // USAGE_LEDGER_MAX_LEN: what XADD's MAXLEN takes as an integer, and a ring this process can hold.
  ledger: { ok: (n: number) => Number.isInteger(n) && n > 0 && n <= 100_000_000, what: 'a whole number from 1 to 100000000' },
} as const;

export function numberOf(s: Setting, kind: keyof typeof NUMBERS): number {
  const n = s.value.trim() === '' ? NaN : Number(s.value);
  if (!NUMBERS[kind].ok(n)) throw new SettingsError(`${s.from} must be ${NUMBERS[kind].what} (got "${s.value}")`);
  return n;
}

/** The longest REDIS_PIPELINE_WINDOW: a decision waits for it before its Redis call, and Envoy's rate-limit filter
 * gives the whole call 20 ms by default. */
export const MAX_PIPELINE_WINDOW_MS = 10;
/** The largest REDIS_PIPELINE_LIMIT: past it a call is split anyway. */
export const MAX_PIPELINE_LIMIT = MAX_BATCH_KEYS;

/** REDIS_PIPELINE_WINDOW (a Go duration, as envoyproxy/ratelimit reads it) and REDIS_PIPELINE_LIMIT. Node's timers
 * count whole milliseconds, so a window is rounded to one; one under a millisecond (radix's 150us, say) is what
 * batching per event-loop turn already does under load: 0. */
export function batchWindowOf(window: Setting, limit: Setting, timeoutMs: number): { windowMs: number; limit: number } {
  const ms = durationOf(window);
  const windowMs = ms < 1 ? 0 : Math.round(ms);
  if (windowMs > MAX_PIPELINE_WINDOW_MS)
    throw new SettingsError(
      `${window.from} must be at most ${MAX_PIPELINE_WINDOW_MS}ms (got "${window.value}"): each decision waits for it before its Redis call, ` +
        "within Envoy's rate-limit timeout (20 ms by default)",
    );
  // What a window holds a call comes off its Redis deadline (store/redis-store.ts send): it must leave the call at
  // least as long as it held it. A window of 10 ms under a timeout of 11 left ~1 ms, and a healthy Redis's calls
  // failed (10 % in round 5).
  if (windowMs > 0 && 2 * windowMs > timeoutMs)
    throw new SettingsError(
      `${window.from} must be at most half the Redis timeout (${timeoutMs} ms; got "${window.value}"): the time a call is held ` +
        'comes off its deadline, and what is left must be at least as long',
    );
  const most = numberOf(limit, 'whole');
  if (most > MAX_PIPELINE_LIMIT)
    throw new SettingsError(`${limit.from} must be at most ${MAX_PIPELINE_LIMIT}, the most keys one Redis call carries (got "${limit.value}")`);
  // Without a window there is nothing to send sooner: a limit would only cut each turn's call into smaller ones.
  return { windowMs, limit: windowMs > 0 ? most : 0 };
}

export function durationOf(s: Setting): number {
  const ms = parseGoDuration(s.value);
  if (ms === undefined) throw new SettingsError(`${s.from} must be a duration such as 3s, 500ms or 1m30s (got "${s.value}")`);
  return ms;
}

/** Several workers share counters only through Redis: with the memory store each would admit the whole limit. */
export function workersOf(s: Setting, store: 'memory' | 'redis'): number {
  const n = numberOf(s, 'positive');
  if (n > 1 && store !== 'redis')
    throw new SettingsError(
      `${s.from} ${n} needs --store redis: the memory store's counters are per process, so ${n} workers would each admit the whole limit`,
    );
  return n;
}

/** One of `options`, in any case (envoyproxy/ratelimit writes BACKEND_TYPE=REDIS, REDIS_TYPE=SINGLE). */
export function choice<T extends string>(s: Setting, options: readonly T[], unsupported: Record<string, string> = {}): T {
  const lower = s.value.trim().toLowerCase();
  if ((options as readonly string[]).includes(lower)) return lower as T;
  const why = unsupported[lower] ? `: ${unsupported[lower]}` : '';
  throw new SettingsError(`${s.from} must be ${options.slice(0, -1).join(', ')} or ${options.at(-1)} (got "${s.value}")${why}`);
}

export function logLevelOf(s: Setting): LogLevel {
  const lower = s.value.trim().toLowerCase();
  const level = LEVEL_ALIASES[lower] ?? lower;
  if ((LOG_LEVELS as readonly string[]).includes(level)) return level as LogLevel;
  throw new SettingsError(`${s.from} must be one of ${LOG_LEVELS.join(', ')} (got "${s.value}")`);
}
