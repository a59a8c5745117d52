import type { DecisionInput, DescriptorInput } from '../../src/limiter/plan.js';
import type { CheckOp, CounterCheck } from '../../src/limits/check.js';
import { BUCKET, FIXED, SLOTS } from './kinds.js';

/** One window to check, as the limiter sends it: 3 a second, 1 hit, a plain fixed window, unless `over` says.
 * Its op, unless given, as plan.ts makes it for those hits: a check for 0, else a count (a take of slots). */
export function counterCheck(over: Partial<CounterCheck> = {}): CounterCheck {
  const hits = over.hits ?? 1;
  const op: CheckOp = over.op ?? (hits === 0 ? 'check' : over.kind === SLOTS ? 'take' : 'count');
  return {
    key: 'k',
    windowMs: 1000,
    limit: 3,
    op,
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

/** An in-flight check of `n` slots: n > 0 takes them, n < 0 gives -n back, 0 checks for one (the tests' shorthand;
 * a check itself never holds negative hits: its op says what it does). */
export function slotOp(n: number): Pick<CounterCheck, 'op' | 'hits'> {
  return { op: n < 0 ? 'giveBack' : n === 0 ? 'check' : 'take', hits: Math.abs(n) };
}

/** An in-flight call as Envoy sends it: one descriptor [key=value, request_id=id], a take, or with `giveBack`
 * its stream-done call (is_negative_hits); `extra` descriptors after it. */
export function inFlightCall(at: { domain: string; key: string; value: string }, id: string, giveBack = false, extra: DescriptorInput[] = []): DecisionInput {
  const entries = [
    { key: at.key, value: at.value },
    { key: 'request_id', value: id },
  ];
  return { domain: at.domain, hits: 1, descriptors: [{ entries, ...(giveBack && { refund: true }) }, ...extra] };
}

/** A take of an in_flight rule on `tenant` in `domain`, by request id: `takeOf('k')('acme', 'r1')`. */
export function takeOf(domain: string): (tenant: string, id: string) => DecisionInput {
  return (tenant, id) => inFlightCall({ domain, key: 'tenant', value: tenant }, id);
}
