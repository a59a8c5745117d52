import { hashTag, windowKeyParts } from '../counters/keys.js';
import type { CheckResult, CounterCheck, UsageTag } from '../limits/check.js';

/** The usage ledger (issue 62, docs/spend.md#the-usage-ledger): one event per charge, settlement, unreserved
 * settlement, refund and expired reservation of a rule with `usage`, appended in the store step that counts
 * it (lua/usage.lua on Redis, a Redis Stream; memory-usage-ledger.ts in this process), so an event is written
 * exactly when its tokens are, and a replayed settlement (which counts nothing) writes none. */

/** About how many events each stream keeps (USAGE_LEDGER_MAX_LEN): past it, the oldest go, exported or not
 * (counted: tollgate_usage_dropped). 163 B an event in Redis (MEMORY USAGE, measured): a million is ~165 MB per stream. */
export const DEFAULT_USAGE_MAX_LEN = 1_000_000;

export type UsageOutcome = 'charged' | 'settled' | 'unreserved' | 'refunded' | 'expired';

/** One event, as exported: where it is (its stream: '' for one Redis's, a Cluster stream's tag, `mem-<boot ms>`
 * for a memory ring; and its id there), when (ms), the rule and window, the counter's tag (fingerprints), the
 * tokens the request cost (usageOutcomes; a refund: negative), the reservation's estimate, the request id's
 * fingerprint, and the descriptor's values (JSON: opted-in ones verbatim, the rest as `fp:` fingerprints). */
export interface UsageEvent {
  stream: string;
  id: string;
  t: number;
  domain: string;
  rule: string;
  window: string;
  counter: string;
  outcome: UsageOutcome;
  tokens: number;
  estimate: number;
  rid: string;
  values: string;
}

/** What an event says of its descriptor, but its outcome and numbers. */
export type UsageSubject = Pick<UsageEvent, 'domain' | 'rule' | 'window' | 'counter' | 'values'>;

export function subjectOf(c: CounterCheck & { usage: UsageTag }): UsageSubject {
  return { ...c.usage, window: windowKeyParts(c.key).windowName, counter: hashTag(c.key) };
}

/** The events of a decided request, as lua/usage.lua writes them (line for line): per descriptor with `usage`
 * (its first window), its settlement or unreserved settlement, else its refund or charge, by what it counted.
 * An event's tokens are what the request cost: a settlement's what the stream cost (but what an expired
 * reservation's own event said: `expired`, the groups whose reservation had), a charge's what it counted, a
 * refund's the most any of its windows gave back (negative). Expired reservations are the reservations' own
 * events (memory-reservations.ts). */
export function usageOutcomes(
  checks: readonly CounterCheck[],
  result: Pick<CheckResult, 'counted' | 'reservations'>,
  expired: ReadonlySet<number> = new Set(),
): { check: CounterCheck & { usage: UsageTag }; outcome: UsageOutcome; tokens: number; estimate: number; rid: string }[] {
  const out: ReturnType<typeof usageOutcomes> = [];
  checks.forEach((c, i) => {
    if (!c.usage || (i > 0 && checks[i - 1]!.group === c.group)) return;
    const check = c as CounterCheck & { usage: UsageTag };
    const o = c.reservation && result.reservations?.[c.group];
    const counted = result.counted?.[i] ?? 0;
    if (o?.event === 'settled') {
      out.push({ check, outcome: 'settled', tokens: c.hits - (expired.has(c.group) ? o.estimate : 0), estimate: o.estimate, rid: c.reservation!.id });
    } else if (o?.event === 'unreserved') out.push({ check, outcome: 'unreserved', tokens: c.hits, estimate: 0, rid: c.reservation!.id });
    else if (!c.reservation && c.op === 'refund') {
      // The most any window of the descriptor gave back (a window that turned since holds less).
      const back = Math.min(0, ...checks.flatMap((x, j) => (x.group === c.group ? [result.counted?.[j] ?? 0] : [])));
      if (back !== 0) out.push({ check, outcome: 'refunded', tokens: back, estimate: 0, rid: '' });
    } else if (!c.reservation && c.op === 'count' && counted !== 0) out.push({ check, outcome: 'charged', tokens: counted, estimate: 0, rid: '' });
  });
  return out;
}
