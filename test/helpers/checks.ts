import { BUCKET, FIXED } from '../../src/config/kinds.js';
import type { CounterCheck } from '../../src/limits/check.js';

/** One window to check, as the limiter sends it: 3 a second, 1 hit, a plain fixed window, unless `over` says. */
export function counterCheck(over: Partial<CounterCheck> = {}): CounterCheck {
  return {
    key: 'k',
    windowMs: 1000,
    limit: 3,
    hits: 1,
    // A burst makes a token bucket unless the kind says otherwise, as plan.ts's limits do.
    kind: over.kind ?? (over.burst ? BUCKET : FIXED),
    burst: 0,
    group: 0,
    shadow: false,
    quota: false,
    charge: false,
    calendar: 0,
    reservation: undefined,
    slots: undefined,
    ...over,
  };
}
