import { type CounterCheck, type ReservationOutcome, settle } from './check.js';
import { ALGORITHMS } from './kinds/index.js';

/** The decision of a request that holds a charge, a reservation, a refund or slots, given what each
 * window holds: the memory store applies it, check-and-incr.lua's decide_charges (lua/charges.lua) is the same rules line for
 * line, and the store conformance suite holds them together. Requests without either never come here.
 *
 * Per descriptor (group), by what it asks:
 *   normal     as every other request: counted when admitted and the descriptor has room
 *   charge     charge_mode and hits > 0: counted in full whatever the answer; over when it went past the limit
 *   reserve    a request id seen for the first time: its hits reserved like a normal request's (all or
 *              nothing), remembered as made, or as refused when they were not counted
 *   settle     the id of a reservation made (open, or forgotten unsettled while its record is kept): the
 *              difference to its estimate counted like a charge, in the window it was reserved in; a window
 *              that has turned since keeps the estimate and takes only what exceeds it (what it gave back
 *              would be taken from a window that never held it)
 *   unreserved a settlement (settlement_key) that finds no record: the request phase never reached the store,
 *              or its record is gone; charged in full, remembered as settled so it counts once
 *   late       the id of a reservation refused or settled: nothing counted, answered as a check (a request
 *              refused costs nothing; a settlement sent twice counts once)
 *   refund     op refund (Envoy 1.38's is_negative_hits): given back whatever the answer, never over; a
 *              window's count never goes below 0 (only the current window gives back: the one before is
 *              past), a bucket never holds more than its burst (its debt never below 0)
 *   take       op take (or check) on in-flight slots: as normal, against the slots held
 *   again      a take by a request id that already holds slots: admitted, nothing taken
 *   return     op giveBack: the id's slots, or (no id) up to hits of those held;
 *              never over
 *   full       a new id where the counter (or the store) holds as many open reservations as it may:
 *              refused, nothing counted. Ended records (refused, settled, forgotten) never make a counter
 *              full: they are kept within bounds of their own, the oldest dropped first. */

/** What a store holds for a request id. */
export type Held = { state: 'reserved' | 'expired'; estimate: number; atMs: number } | { state: 'refused' | 'settled' } | undefined;

type Kind = 'normal' | 'charge' | 'reserve' | 'settle' | 'unreserved' | 'late' | 'full' | 'refund' | 'take' | 'again' | 'return';

export interface ChargeDecision {
  admitted: boolean;
  over: boolean[];
  /** Per check, what to add (a settlement's may be negative; the store keeps counts at 0 or more). */
  counted: number[];
  reservations: (ReservationOutcome | undefined)[];
}

/** What a store knows of a request's ids: its record of a reservation's id, whether a new reservation would
 * pass its bound, and the slots an in-flight check's id holds. */
export interface Records {
  held: (c: CounterCheck) => Held;
  full: (c: CounterCheck) => boolean;
  holding: (c: CounterCheck) => number;
}

/** `used`: per check, a window's count as decisions weigh it (a sliding window's estimate), a bucket's debt,
 * or the slots held; `curr`: the current window's own count (a bucket: its debt; slots: those held). */
export function decideCharges(
  checks: readonly CounterCheck[],
  used: readonly number[],
  curr: readonly number[],
  nowMs: number,
  store: Records,
): ChargeDecision {
  const n = checks.length;
  const kinds: Kind[] = [];
  const records: Held[] = [];
  const over = new Array<boolean>(n);
  const asks = new Array<number>(n);
  // Slots this request's earlier takes ask on a counter: its descriptors never take more than the limit together.
  let pending: Map<string, number> | undefined;
  for (let i = 0; i < n; i++) {
    const c = checks[i]!;
    let kind = kinds[c.group];
    if (kind === undefined) {
      records[c.group] = c.reservation && store.held(c);
      kind = kinds[c.group] = ALGORITHMS[c.kind]!.slots ? slotKind(c, store) : kindOf(c, records[c.group], store.full);
    }
    const ask = askOf(kind, c, records[c.group] as { estimate: number; atMs: number }, curr[i]!, nowMs, store);
    asks[i] = ask;
    // A charge or settlement is over when it took the window past its limit; anything else asks for room.
    let before = 0;
    if (kind === 'take') {
      pending ??= new Map();
      before = pending.get(c.key) ?? 0;
      pending.set(c.key, before + c.hits);
    }
    over[i] = kind === 'full' || (!gives(kind) && exceeds(c, used[i]! + before, charges(kind) ? ask : Math.max(ask, 1)));
  }
  const { admitted, groupOver } = settle(checks, over);
  const counted = new Array<number>(n);
  const reservations: (ReservationOutcome | undefined)[] = [];
  for (let i = 0; i < n; i++) {
    const c = checks[i]!;
    const kind = kinds[c.group]!;
    const room = admitted && !groupOver[c.group];
    counted[i] = charges(kind) ? asks[i]! : (kind === 'normal' || kind === 'reserve' || kind === 'take') && room ? c.hits : 0;
    if (c.reservation && reservations[c.group] === undefined) reservations[c.group] = outcome(kind, room, c, records[c.group]);
  }
  return { admitted, over, counted, reservations };
}

/** Kinds counted whatever the answer. */
function charges(kind: Kind): boolean {
  return kind === 'charge' || kind === 'settle' || kind === 'unreserved' || kind === 'refund' || kind === 'return';
}

/** Kinds never over: they only give back, or take nothing. */
function gives(kind: Kind): boolean {
  return kind === 'refund' || kind === 'return' || kind === 'again';
}

/** An in-flight check's kind: a give-back, a take by an id already holding slots, or a take (never refused for
 * a store's bound: the memory store makes room from the counters that hold most, memory-slots.ts). */
function slotKind(c: CounterCheck, store: Records): Kind {
  if (c.op === 'giveBack') return 'return';
  if (c.slots!.id !== undefined && store.holding(c) > 0) return 'again';
  return 'take';
}

/** Slots a give-back without an id returns, at most, per descriptor (slots.lua's SLOT_GIVE_BACK): each is a
 * holder or more, so the work of one is bounded whatever hits it names (2^32 once ran a 631 ms script over
 * 661,000 holders); the rest come back by their leases. Envoy gives back one request's at a time. */
export const SLOT_GIVE_BACK = 100;

/** What a check adds, by its kind (a give-back, a settlement or a refund: negative). */
function askOf(kind: Kind, c: CounterCheck, record: { estimate: number; atMs: number }, curr: number, nowMs: number, store: Records): number {
  if (kind === 'settle') return settlement(c, record, nowMs);
  if (kind === 'late' || kind === 'again') return 0;
  if (kind === 'refund') return refund(c, curr);
  if (kind === 'return') {
    // A give-back of 0 gives nothing, an id's slots included.
    const back = c.hits === 0 ? 0 : c.slots!.id !== undefined ? store.holding(c) : Math.min(c.hits, curr, SLOT_GIVE_BACK);
    return back === 0 ? 0 : -back;
  }
  return c.hits;
}

/** What a refund gives back: all its hits, or what the window holds (a bucket: its debt, in whole requests
 * rounded up), so a count never goes below 0 and what is reported is what was given. */
function refund(c: CounterCheck, curr: number): number {
  const given = Math.min(c.hits, ALGORITHMS[c.kind]!.refundable(c, curr));
  return given === 0 ? 0 : -given; // not -0, which is a distinct value to its readers
}

function kindOf(c: CounterCheck, record: Held, full: (c: CounterCheck) => boolean): Kind {
  if (c.op === 'refund') return 'refund';
  if (c.reservation) {
    if (record === undefined) return c.reservation.settles ? 'unreserved' : full(c) ? 'full' : 'reserve';
    return record.state === 'reserved' || record.state === 'expired' ? 'settle' : 'late';
  }
  return c.charge && c.hits > 0 ? 'charge' : 'normal';
}

/** What a settlement adds to one window: the actual hits less the estimate, in the window (or bucket) that
 * holds the estimate; past it, only what exceeds the estimate. */
function settlement(c: CounterCheck, r: { estimate: number; atMs: number }, nowMs: number): number {
  const delta = c.hits - r.estimate;
  return delta >= 0 || ALGORITHMS[c.kind]!.holdsSince(c, r.atMs, nowMs) ? delta : 0;
}

/** Whether `n` more take a window, bucket or slots past what it holds (the check's algorithm says). */
function exceeds(c: CounterCheck, used: number, n: number): boolean {
  return ALGORITHMS[c.kind]!.exceeds(c, used, n);
}

function outcome(kind: Kind, room: boolean, c: CounterCheck, record: Held): ReservationOutcome {
  if (kind === 'reserve') return room ? { event: 'made', estimate: c.hits } : { event: 'refused', estimate: 0 };
  if (kind === 'settle') return { event: 'settled', estimate: (record as { estimate: number }).estimate };
  return { event: kind === 'full' ? 'full' : kind === 'unreserved' ? 'unreserved' : 'late', estimate: 0 };
}
