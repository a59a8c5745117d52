/** A kind of limit's code: its place in the registry (kinds/index.ts). Defined here, where checks carry it, so the
 * kinds (which read checks) and checks import one way. */
export type KindCode = number;

/** What a limit is asked and answers, whichever store keeps its counters: a request's checks (one per window of
 * each descriptor), the reservations and slots they carry, and the result. limiter/ builds them, store/ keeps
 * the counters, kinds/ says what each kind's counter means. */

/** What a check does to its counter, said outright rather than read from the sign of its hits:
 *   check     reads only (hits 0, or a peek): is the window full?
 *   count     adds hits if the request is admitted (charge_mode, `charge`: whatever the answer; a reservation
 *             on the check makes its first call reserve and its next settle, as the store finds it)
 *   refund    Envoy 1.38's is_negative_hits: gives hits back to the window, whatever the answer, never refused
 *   take      an in_flight rule: takes hits slots, all or none (an id already holding some takes none)
 *   giveBack  an in_flight rule: gives slots back (the id's, or without one up to hits of the oldest), never
 *             refused
 * Hits are never negative. The Redis script's shapes still carry a refund and a give-back as negative hits
 * (and a refund as shadow): redis-batch.ts writes that, and only there. */
export type CheckOp = 'check' | 'count' | 'refund' | 'take' | 'giveBack';

/** What a descriptor's check does: Envoy 1.38's is_negative_hits gives back (a refund, or an in_flight rule's
 * slots), hits 0 only checks, more take slots or count. A refund of 0 still refunds: it gives nothing and is never
 * refused. */
export function opOf(refund: boolean, hits: number, slots: boolean): CheckOp {
  if (refund) return slots ? 'giveBack' : 'refund';
  if (hits === 0) return 'check';
  return slots ? 'take' : 'count';
}

/** Whether a check gives back (a refund or an in-flight give-back): never refused, and what it gives makes room. */
export function givesBack(c: { op: CheckOp }): boolean {
  return c.op === 'refund' || c.op === 'giveBack';
}

/** One window of one descriptor to check, and to count if the request is admitted. */
export interface CounterCheck {
  /** The window's key (src/counters/keys.ts): the descriptor's counter and the window unit. The store keeps
   * the window start inside the counter, so the key stays the same from one window to the next. Never holds
   * a raw value. */
  key: string;
  windowMs: number;
  limit: number;
  /** What this check does with `hits` (see CheckOp). */
  op: CheckOp;
  /** How many: added when admitted, given back, taken or returned, as `op` says; never negative. */
  hits: number;
  /** The limit's algorithm (limits/kinds/: FIXED, SLIDING, BUCKET, SLOTS), whose module decides what the
   * counter's value means: ALGORITHMS[kind]. */
  kind: KindCode;
  /** A token bucket's capacity in requests (GCRA, src/counters/bucket.ts), refilled at `limit` per
   * `windowMs`; 0 for every other kind. */
  burst: number;
  /** The descriptor this window belongs to: a descriptor's windows are counted all together or not at all. */
  group: number;
  /** A shadow descriptor never blocks the request. */
  shadow: boolean;
  /** A quota-mode descriptor blocks the request only when every quota-mode descriptor of the request is over
   * (envoyproxy/ratelimit's quota_mode, src/service/ratelimit.go). */
  quota: boolean;
  /** charge_mode: hits > 0 are a charge for work already done, counted whatever the answer and even past the
   * limit; the window is over when the charge took it past its limit. hits 0 still only checks. */
  charge: boolean;
  /** How the window is aligned (counters/calendar.ts): 0 for every window but calendar weeks and months. */
  calendar: number;
  /** A charge-mode descriptor's reservation, the same object on each of its windows (see Reservation). */
  reservation: Reservation | undefined;
  /** A count of a charge_mode rule's own window (not Envoy's limit, not a refund): its counter goes to the
   * window's spend list (store/spend-top.ts). */
  spend?: boolean;
  /** A rule with a usage ledger (config `usage`): what its events carry; the same object on each window of the
   * descriptor. Absent for every other. */
  usage?: UsageTag;
  /** Set for an `in_flight` rule's check: not a window but slots, at most `limit` held at once, each for at
   * most `windowMs` (its lease): op take, giveBack or check. Sent in charge mode. */
  slots: Slots | undefined;
}

/** What a usage-ledger event names (limiter/usage-tag.ts): the rule, and the descriptor's values as JSON (those
 * the config opts in verbatim, the rest as fingerprints). Config text and opted-in values only. */
export interface UsageTag {
  domain: string;
  rule: string;
  values: string;
}

/** Who holds the slots an in-flight check takes: the fingerprint of its request id (request_key), or
 * undefined for slots as counts (a give-back returns the oldest holders' slots first). A take by an id that
 * already holds slots takes none and is admitted; a give-back by an id returns what it holds, else nothing. */
export interface Slots {
  id: string | undefined;
}

/** A reservation named by a request id on a descriptor's counter. The first call with the id reserves its
 * hits if they fit (nothing if not, remembered as refused); the next settles it to its own hits: the
 * difference counted (past the limit too) or given back, in the window it was reserved in (a later window
 * gets only what exceeds the estimate, and gives nothing back). One refused settles to nothing: a request
 * refused costs nothing. Later calls change nothing. Unsettled, it is forgotten after ttlMs, charged at its
 * estimate. */
export interface Reservation {
  /** Where the counter's reservations are kept (counters/keys.ts reservationKey). */
  key: string;
  /** The fingerprint of the request id. */
  id: string;
  ttlMs: number;
  /** Named by the rule's settlement_key: the stream's end, never a reservation. With no reservation to settle
   * (never made, or forgotten), it is a plain charge; recorded as settled, so it counts once. */
  settles?: boolean;
}

/** What became of a request's reservation: made (its hits reserved), refused (they did not fit: nothing
 * reserved), settled (an open reservation, or one forgotten unsettled whose record is still kept), late (a
 * settlement after the reservation was refused or settled: nothing counted), full (the store's bound on open
 * reservations was reached: refused like one that does not fit), unreserved (a settlement that found no
 * reservation: charged in full). */
export type ReservationEvent = 'made' | 'refused' | 'settled' | 'late' | 'full' | 'unreserved';

/** The events in the order check-and-incr.lua numbers them (1 = made). */
export const RESERVATION_EVENTS: readonly ReservationEvent[] = ['made', 'refused', 'settled', 'late', 'full', 'unreserved'];

export interface ReservationOutcome {
  event: ReservationEvent;
  /** The reservation's estimate (0 unless made or settled). */
  estimate: number;
}

export interface CounterWindow {
  key: string;
  windowMs: number;
  /** How the window is aligned (counters/calendar.ts); absent: epoch-aligned. */
  calendar?: number;
}

export interface CheckResult {
  /** The store's clock: windows and resets are computed from it, so replicas agree. */
  nowMs: number;
  /** True when no non-shadow descriptor is over its limit; then every descriptor with room was counted. */
  admitted: boolean;
  /** Per check, before this request: the current window's count and (sliding only) the previous one's; for a
   * token bucket, curr is its debt (src/counters/bucket.ts) and prev 0. */
  curr: number[];
  prev: number[];
  over: boolean[];
  /** Set by a store that answers without counting (the deny failure policy): the wait to advertise. */
  retryAfterMs?: number;
  /** Where the answer came from, for metrics: the store itself (unset), the local over-limit cache, the
   * fallback counters of the `local` policy, or the `deny` policy's answer without counters. */
  source?: 'store' | 'cache' | 'fallback' | 'policy';
  /** Set only when a check is a charge or holds a reservation: per check, what this request added to it (a
   * settlement's difference, which may be negative). Otherwise an admitted request added each window's hits
   * to every descriptor with room, a refused one nothing. */
  counted?: number[];
  /** Per group with a reservation, what became of it. */
  reservations?: (ReservationOutcome | undefined)[];
  /** Reservations found expired unsettled while deciding (they stay charged at their estimate). */
  expired?: number;
  /** Per check (in-flight slots only, else 0): slots found past their lease while deciding. */
  slotsExpired?: number[];
  /** Keys whose windows a refused request counted for a moment and gave back (a request over several Redis
   * Cluster masters: src/store/across-parts.ts): another request may have found them full meanwhile. */
  givenBack?: string[];
}

/** The admission rule every store applies (and check-and-incr.lua, line for line): a descriptor (group) is
 * over if any of its windows is; the request is admitted unless a descriptor that is neither shadow nor
 * quota-mode is over, or the request has quota-mode descriptors and every one of them is over; then only
 * descriptors with room are counted. A charge (charge: true, hits > 0) over its limit makes the request
 * OVER_LIMIT too (the truthful answer), but is counted whatever the answer: it pays for work done. */
export function settle(checks: readonly CounterCheck[], over: readonly boolean[]): { admitted: boolean; groupOver: boolean[] } {
  const groupOver: boolean[] = [];
  const quotaGroup: boolean[] = [];
  let admitted = true;
  let quotaGroups = 0;
  let quotaOver = 0;
  for (let i = 0; i < checks.length; i++) {
    const c = checks[i]!;
    if (c.quota && !quotaGroup[c.group]) {
      quotaGroup[c.group] = true;
      quotaGroups++;
    }
    if (!over[i]) continue;
    if (!groupOver[c.group] && c.quota && !c.shadow) quotaOver++; // a shadow quota descriptor passes (its status is OK)
    groupOver[c.group] = true;
    if (!c.shadow && !c.quota) admitted = false;
  }
  if (quotaGroups > 0 && quotaOver === quotaGroups) admitted = false;
  return { admitted, groupOver };
}
