import type { CompiledLimit, Rule } from '../config/compiled.js';
import type { CounterCheck, Store } from '../store/store.js';
import { hasRoom, slidingUsed, windowStartMs } from './window.js';

/** The limits a rule holds a client to: its tier's, when the rule has them, else its own. */
export function limitsFor(rule: Rule, tier: string | null | undefined): readonly CompiledLimit[] {
  return (tier != null && rule.tierLimits.get(tier)) || rule.limits;
}

/** The store key of one window of a descriptor's counter. */
export function windowKey(counterKey: string, limit: CompiledLimit): string {
  return `${counterKey}:${limit.unit}`;
}

export interface PeekTarget {
  /** The descriptor's counter key (see counterKey). */
  key: string;
  limit: CompiledLimit;
  sliding: boolean;
}

export interface WindowUse {
  used: number;
  remaining: number;
  /** No room for one more request. */
  full: boolean;
  resetAtMs: number;
}

/** Current use of windows, read with check-only calls: nothing is counted, nothing is blocked. */
export async function peekWindows(store: Store, targets: readonly PeekTarget[]): Promise<WindowUse[]> {
  if (targets.length === 0) return [];
  const checks: CounterCheck[] = targets.map((t, group) => ({
    key: windowKey(t.key, t.limit),
    windowMs: t.limit.windowSeconds * 1000,
    limit: t.limit.requestsPerUnit,
    hits: 0,
    sliding: t.sliding,
    group,
    shadow: true,
  }));
  const r = await store.check(checks);
  return checks.map((c, i) => {
    const used = c.sliding ? slidingUsed(r.prev[i]!, r.curr[i]!, r.nowMs, c.windowMs) : r.curr[i]!;
    return {
      used: Math.round(used * 100) / 100,
      remaining: Math.max(0, Math.floor(c.limit - used)),
      full: !hasRoom(used, 1, c.limit),
      resetAtMs: windowStartMs(r.nowMs, c.windowMs) + c.windowMs,
    };
  });
}
