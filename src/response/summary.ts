import { cachedFingerprint } from '../fingerprint.js';
import type { Decision, DecisionInput } from '../limiter/limiter.js';
import { bindingWindow } from './pick.js';

/** A decision in the words a support engineer searches by: which client, which rule and limit, how much was
 * left, what was answered. One summary feeds both the decision's span (tracing/) and the decision log
 * (observe/decision-log.ts), so the two always agree. It holds only what the config names (domain, rule ids,
 * limit names, tiers) and the client's fingerprint: never a value from the request. */
export interface DecisionSummary {
  /** The configured domain; undefined when the request named one the config does not hold. */
  domain: string | undefined;
  code: 'OK' | 'OVER_LIMIT';
  /** The fingerprint of the first descriptor entry keyed by the domain's token_key, when there is one. */
  client: string | undefined;
  /** Who answered: the store, the over-limit cache, the fallback counters, the failure policy, or none. */
  source: Decision['source'];
  /** The rule and limit that rejected the request (the longest wait of them); undefined when admitted. */
  blocking: { rule: string; limit: string } | undefined;
  /** The fewest requests left in any enforced window after this one; undefined when nothing limits. */
  remaining: number | undefined;
  /** The rule and limit of that window (the first such descriptor on a tie). */
  tightest: { rule: string; limit: string } | undefined;
  retryAfterMs: number;
  descriptors: DescriptorSummary[];
}

export interface DescriptorSummary {
  /** The matched rule's id, or undefined when no rule matched. */
  rule: string | undefined;
  code: 'OK' | 'OVER_LIMIT';
  tier: string | undefined;
  /** The window that decides this descriptor (over with the longest wait, else fewest left). */
  limit: string | undefined;
  remaining: number | undefined;
  shadow: boolean;
  /** What its checks did, as the store was told (limits/check.ts CheckOp): absent when nothing limits it. */
  op?: string;
  /** charge_mode only: hits counted by a charge or settlement, hits past the limit, the reservation's event. */
  charged?: number;
  debt?: number;
  reservation?: string;
  /** A refund: hits given back. in_flight: what the call did with its slots (taken, refused, returned) and
   * how many, the leases it found ended ("taken 1, 2 expired"), and a give-back that found its id holding
   * nothing ("returned 0, late": its lease had ended, or its take was refused or never came). */
  refunded?: number;
  /** A refund its rule does not take (`refunds: false`): nothing checked, nothing given back. */
  refundIgnored?: boolean;
  slots?: string;
}

export function summarize(input: DecisionInput, d: Decision): DecisionSummary {
  const descriptors: DescriptorSummary[] = [];
  let blocking: DecisionSummary['blocking'];
  let blockingWait = -1;
  let remaining: number | undefined;
  let tightest: DecisionSummary['tightest'];
  for (const o of d.descriptors) {
    const w = bindingWindow(o.windows);
    const limit = w?.limit.name;
    descriptors.push({
      rule: o.rule?.id,
      code: o.over && !o.shadowStatus ? 'OVER_LIMIT' : 'OK',
      tier: o.tier,
      limit,
      remaining: w?.remaining,
      shadow: o.shadow,
      ...(o.op && { op: o.op }),
      ...(o.charged !== undefined && { charged: o.charged }),
      ...(o.debt !== undefined && { debt: o.debt }),
      ...(o.reservation && { reservation: o.reservation.event }),
      ...(o.refunded !== undefined && { refunded: o.refunded }),
      ...(o.refundIgnored && { refundIgnored: true }),
      ...(o.slots && { slots: slotsText(o.slots) }),
    });
    if (!w || o.shadow) continue;
    if (remaining === undefined || w.remaining < remaining) {
      remaining = w.remaining;
      tightest = { rule: o.rule?.id ?? '(request limit)', limit: limit! };
    }
    if (d.overLimit && o.over && w.retryAfterMs > blockingWait) {
      blockingWait = w.retryAfterMs;
      blocking = { rule: o.rule?.id ?? '(request limit)', limit: limit! };
    }
  }
  return {
    domain: d.domain?.name,
    code: d.overLimit ? 'OVER_LIMIT' : 'OK',
    client: d.domain ? clientOf(input, d.domain.tokenKey) : undefined,
    source: d.source,
    blocking,
    remaining,
    tightest,
    retryAfterMs: d.retryAfterMs,
    descriptors,
  };
}

/** The fingerprint of the first entry keyed by the domain's token_key. */
function clientOf(input: DecisionInput, tokenKey: string): string | undefined {
  for (const desc of input.descriptors) {
    for (const e of desc.entries) if (e.key === tokenKey) return cachedFingerprint(e.value);
  }
  return undefined;
}

/** An in-flight descriptor's line in the decision log: what it did with its slots, the leases it ended, and
 * whether a give-back came late. */
function slotsText(s: NonNullable<Decision['descriptors'][number]['slots']>): string {
  const late = s.event === 'returned' && s.count === 0 ? ', late' : '';
  const expired = s.expired > 0 ? `, ${s.expired} expired` : '';
  return `${s.event} ${s.count}${late}${expired}`;
}
