import { hashTag, reservationTable, slotHolders, storeKey, windowKeyParts } from '../counters/keys.js';
import { type StoreKeyError, StoreMovingError } from '../errors.js';
import { type CheckResult, type CounterCheck, RESERVATION_EVENTS, type ReservationOutcome, settle } from '../limits/check.js';
import { ALGORITHMS } from '../limits/kinds/index.js';
import { spendListed } from './spend-top.js';
import type { BatchSpan, BatchTracer, TraceLink } from './store.js';

/** The wire format of a batch for check-and-incr.lua (its header is the contract): the script's KEYS and ARGV
 * from the requests of one event-loop turn, and each request's answer from the script's reply. Pure: the
 * Redis store (redis-store.ts) owns the connection, the timing and the failures. */

/** A request waiting for the next batch: its windows, and how to answer it. */
export interface Pending {
  mode: 'peek' | 'count';
  checks: readonly CounterCheck[];
  /** Set only for a sampled decision. */
  trace: TraceLink | undefined;
  resolve: (r: CheckResult) => void;
  reject: (e: Error) => void;
  /** Decide it at this time of the store's clock, not now: a give-back of a window counted then
   * (across-parts.ts), so that it lands in that window whatever the time. It goes in a call of its own. */
  atMs?: number;
}

/** check-and-incr.lua's modes for a plain request, which sends shapes without groups. */
const SHORT_MODE = { count: 'c', peek: 'p' } as const;

/** A bare count (a fixed window) that is neither shadow, quota nor charge: the script's fast path. */
function isPlain(c: CounterCheck): boolean {
  return ALGORITHMS[c.kind]!.plainCount && !c.shadow && !c.quota && !c.charge;
}

/** The first window of each group that holds a reservation, in order: the script's reservations of a request. */
function reservationsOf(checks: readonly CounterCheck[]): CounterCheck[] {
  const out: CounterCheck[] = [];
  for (const c of checks) if (c.reservation && !out.some((o) => o.group === c.group)) out.push(c);
  return out;
}

/** Where a call writes what goes with a charge: a charged window's spend list (spend-top.ts; undefined where the
 * call cannot reach it: a Cluster's call through redirects, whose keys must share one slot), and a ledger
 * stream (usage-ledger.ts) with its bound. */
export interface Placement {
  spend: ((c: CounterCheck) => string | undefined) | undefined;
  usage: (c: CounterCheck) => string;
  usageMaxLen: number;
}

/** KEYS (every window's store key, in order) and ARGV (the clock, the shapes, then per request its mode, its
 * window count and per window its shape and, unless plain, its group) of one script call. */
export function encodeBatch(batch: readonly Pending[], keyPrefix: string, nowMs: number, placement?: Placement): { keys: string[]; args: (string | number)[] } {
  const keys: string[] = [];
  const shapes: CounterCheck[] = [];
  const tail: (string | number)[] = [];
  for (const p of batch) {
    // A plain request's groups change nothing (its windows are admitted together or not at all): not sent.
    const plain = p.checks.every(isPlain);
    tail.push(plain ? SHORT_MODE[p.mode] : p.mode, p.checks.length);
    for (const c of p.checks) {
      keys.push(storeKey(keyPrefix, c.key));
      if (plain) tail.push(shapeOf(shapes, c));
      else tail.push(shapeOf(shapes, c), c.group);
    }
    if (plain) continue;
    const reservations = reservationsOf(p.checks);
    tail.push(reservations.length);
    for (const c of reservations) {
      const r = c.reservation!;
      for (const k of reservationTable(r.key)) keys.push(storeKey(keyPrefix, k));
      tail.push(c.group, r.id, r.ttlMs, r.settles ? 1 : 0);
    }
    pushSlots(p.checks, tail, keys, keyPrefix);
    pushSpend(p.checks, tail, keys, placement?.spend);
    pushUsage(p.checks, tail, keys, placement);
  }
  const args: (string | number)[] = [nowMs, shapes.length];
  for (const c of shapes) args.push(c.windowMs, c.limit, c.hits, c.kind, c.shadow ? 1 : 0, c.burst, c.quota ? 1 : 0, c.charge ? 1 : 0, c.calendar, c.op);
  for (const a of tail) args.push(a);
  return { keys, args };
}

/** The in-flight checks of a request (check-and-incr.lua's `f`): their count, then each one's place in the
 * request (1-based) and its id ('' for slots as counts); each one's holders hash after the request's other keys. */
function pushSlots(checks: readonly CounterCheck[], tail: (string | number)[], keys: string[], keyPrefix: string): void {
  const at = tail.length;
  tail.push(0);
  checks.forEach((c, i) => {
    if (!ALGORITHMS[c.kind]!.slots) return;
    tail.push(i + 1, c.slots?.id ?? '');
    keys.push(storeKey(keyPrefix, slotHolders(c.key)));
    (tail[at] as number)++;
  });
}

/** The spend lists of a request (check-and-incr.lua's `t`): their count, then each one's window's place in the
 * request (1-based) and its counter's tag; each list's key after the holders' hashes. */
function pushSpend(checks: readonly CounterCheck[], tail: (string | number)[], keys: string[], spendKey: Placement['spend']): void {
  const at = tail.length;
  tail.push(0);
  if (!spendKey) return;
  checks.forEach((c, i) => {
    const list = spendListed(c) ? spendKey(c) : undefined;
    if (list === undefined) return;
    tail.push(i + 1, hashTag(c.key));
    keys.push(list);
    (tail[at] as number)++;
  });
}

/** The ledger streams of a request (check-and-incr.lua's `u`): per descriptor with `usage`, its first window's
 * place, the stream's bound, what its events name, and the stream's key after the spend lists'. */
function pushUsage(checks: readonly CounterCheck[], tail: (string | number)[], keys: string[], placement: Placement | undefined): void {
  const at = tail.length;
  tail.push(0);
  if (!placement) return;
  checks.forEach((c, i) => {
    if (!c.usage || (i > 0 && checks[i - 1]!.group === c.group)) return;
    const { windowName } = windowKeyParts(c.key);
    tail.push(i + 1, placement.usageMaxLen, c.usage.domain, c.usage.rule, windowName, hashTag(c.key), c.usage.values);
    keys.push(placement.usage(c));
    (tail[at] as number)++;
  });
}

/** Whether a batch of this one request can go through the lean script (lua/one-plain.lua): it counts, and
 * every window is a plain epoch-aligned fixed window that counts hits. */
export function isOnePlain(p: Pending): boolean {
  return p.mode === 'count' && p.checks.every((c) => isPlain(c) && c.calendar === 0 && c.hits > 0);
}

/** one-plain.lua's KEYS (each window's base) and ARGV (the clock, then per window its length, limit and hits). */
export function encodeOnePlain(p: Pending, keyPrefix: string, nowMs: number): { keys: string[]; args: (string | number)[] } {
  const keys = new Array<string>(p.checks.length);
  const args: (string | number)[] = [nowMs];
  p.checks.forEach((c, i) => {
    keys[i] = storeKey(keyPrefix, c.key);
    args.push(c.windowMs, c.limit, c.hits);
  });
  return { keys, args };
}

/** A span for a script call that carries at least one sampled decision, linked to each of them; none
 * otherwise (the usual case at a low sampling rate costs one pass over the batch). */
export function batchSpan(tracer: BatchTracer, batch: readonly Pending[], keys: number): BatchSpan | undefined {
  let links: TraceLink[] | undefined;
  for (const p of batch) {
    if (!p.trace) continue;
    links ??= [];
    links.push(p.trace);
  }
  return links && tracer.start(links, { requests: batch.length, keys });
}

/** The checks at these indexes. */
export const pick = (of: readonly CounterCheck[], idx: readonly number[]): CounterCheck[] => idx.map((j) => of[j]!);

/** Indexes of the checks by hash tag. */
export function byHashTag(checks: readonly CounterCheck[]): number[][] {
  const byTag = new Map<string, number[]>();
  checks.forEach((c, i) => {
    const tag = hashTag(c.key);
    const list = byTag.get(tag);
    if (list) list.push(i);
    else byTag.set(tag, [i]);
  });
  return [...byTag.values()];
}

/** The answers of several slots as one, admitted by the admission rule over all of them (a slot alone
 * cannot tell: quota mode spans slots). */
export function merge(checks: readonly CounterCheck[], slots: number[][], parts: CheckResult[]): CheckResult {
  const n = checks.length;
  const out: CheckResult = { nowMs: parts[0]!.nowMs, admitted: false, curr: new Array(n), prev: new Array(n), over: new Array(n) };
  slots.forEach((idx, s) => {
    idx.forEach((i, j) => {
      out.curr[i] = parts[s]!.curr[j]!;
      out.prev[i] = parts[s]!.prev[j]!;
      out.over[i] = parts[s]!.over[j]!;
    });
  });
  out.admitted = settle(checks, out.over).admitted;
  if (parts.some((p) => p.counted)) mergeCharges(checks, slots, parts, out);
  return out;
}

/** The charges' part of several slots' answers: what each check counted, the reservations, the expired. */
function mergeCharges(checks: readonly CounterCheck[], slots: number[][], parts: CheckResult[], out: CheckResult): void {
  out.counted = new Array(checks.length);
  out.reservations = [];
  out.expired = 0;
  slots.forEach((idx, s) => {
    const part = parts[s]!;
    const groupOver = settle(
      idx.map((i) => checks[i]!),
      part.over,
    ).groupOver;
    idx.forEach((i, j) => {
      const c = checks[i]!;
      out.counted![i] = part.counted ? part.counted[j]! : part.admitted && !groupOver[c.group] ? c.hits : 0;
      const o = part.reservations?.[c.group];
      if (o) out.reservations![c.group] = o;
    });
    out.expired! += part.expired ?? 0;
    if (part.slotsExpired) {
      out.slotsExpired ??= new Array<number>(checks.length).fill(0);
      idx.forEach((i, j) => {
        out.slotsExpired![i] = part.slotsExpired![j]!;
      });
    }
  });
}

/** The 1-based index of a window's shape (everything but its key and group) in `shapes`, added if new. A
 * batch holds few: a linear search beats building a key per window. */
function shapeOf(shapes: CounterCheck[], c: CounterCheck): number {
  for (let i = 0; i < shapes.length; i++) {
    const s = shapes[i]!;
    if (
      s.windowMs === c.windowMs &&
      s.limit === c.limit &&
      s.hits === c.hits &&
      s.op === c.op &&
      s.kind === c.kind &&
      s.shadow === c.shadow &&
      s.burst === c.burst &&
      s.quota === c.quota &&
      s.charge === c.charge &&
      s.calendar === c.calendar
    )
      return i + 1;
  }
  return shapes.push(c);
}

/** Splits a batch's reply into each request's answer (layout in check-and-incr.lua: per window its count,
 * negative when it has no room, and the previous count after a sliding one); a request whose keys Redis
 * refused is one string, and fails alone (a Cluster's refusal with StoreMovingError, which the store retries).
 * Returns the requests the script did not decide: on a Cluster master, from the one whose key the node does not
 * serve (NOTLOCAL) on; none otherwise. */
export function answerBatch(batch: Pending[], reply: (number | string)[], refused: (kind: string) => StoreKeyError): Pending[] {
  const nowMs = reply[0] as number;
  let at = 1;
  for (let i = 0; i < batch.length; i++) {
    const p = batch[i]!;
    const head = reply[at++];
    if (head === NOT_LOCAL) return batch.slice(i);
    if (typeof head === 'string') {
      p.reject(head === MOVING ? new StoreMovingError() : refused(head));
      continue;
    }
    const n = p.checks.length;
    const curr = new Array<number>(n);
    const prev = new Array<number>(n);
    const over = new Array<boolean>(n);
    for (let i = 0; i < n; i++) {
      const v = reply[at++] as number;
      over[i] = v < 0;
      curr[i] = v < 0 ? -v - 1 : v;
      prev[i] = ALGORITHMS[p.checks[i]!.kind]!.readsPrevious ? (reply[at++] as number) : 0;
    }
    const result: CheckResult = { nowMs, admitted: head === 1, curr, prev, over };
    if (p.checks.some((c) => c.charge || ALGORITHMS[c.kind]!.slots)) at = readCharges(p.checks, reply, at, result);
    p.resolve(result);
  }
  return [];
}

/** check-and-incr.lua's word for a request whose key its Cluster node does not serve (a master's call: the rest
 * go slot by slot), and for a Cluster's refusal on a slot's call (failing over, a slot moving): no key refusal. */
const NOT_LOCAL = 'NOTLOCAL';
const MOVING = 'MOVING';

/** What a request with a charge window has after its windows (check-and-incr.lua's decide_charges): per
 * window what it counted, per reservation its event and estimate, and the reservations found expired. */
function readCharges(checks: readonly CounterCheck[], reply: (number | string)[], from: number, result: CheckResult): number {
  let at = from;
  result.counted = checks.map(() => reply[at++] as number);
  const reservations: (ReservationOutcome | undefined)[] = [];
  for (const c of reservationsOf(checks)) {
    reservations[c.group] = { event: RESERVATION_EVENTS[(reply[at++] as number) - 1]!, estimate: reply[at++] as number };
  }
  result.reservations = reservations;
  result.expired = reply[at++] as number;
  if (checks.some(holdsSlots)) result.slotsExpired = checks.map((c) => (holdsSlots(c) ? (reply[at++] as number) : 0));
  return at;
}

const holdsSlots = (c: CounterCheck): boolean => ALGORITHMS[c.kind]!.slots;
