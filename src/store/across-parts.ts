import { type CheckResult, type CounterCheck, givesBack, settle } from '../limits/check.js';
import { ALGORITHMS } from '../limits/kinds/index.js';
import { merge, type Pending, pick } from './redis-batch.js';
import type { TraceLink } from './store.js';

/** Queues part of a request for the next script call to a master (or a slot's hash tag): RedisStore.enqueue. */
export type Enqueue = (
  mode: Pending['mode'],
  checks: readonly CounterCheck[],
  to: string,
  trace: TraceLink | undefined,
  urgent: boolean,
  atMs?: number,
) => Promise<CheckResult>;

/** A request whose counters are on several masters (or slots), which one script call cannot reach: `parts` are the
 * checks' indexes by destination, `queues` the destinations.
 *
 * A plain request (every window counted when admitted, none a charge, a reservation, a slot or a quota) is counted
 * on every part at once, each part atomically; when a part refuses, the parts that counted give their hits back (an
 * Envoy 1.38 refund of what they added, charge-rules.ts, in the window counted) before the answer. One round trip
 * for an admitted request, where asking first took two: ten descriptors on a 3-master Cluster had 4.2× one's p99
 * (issue 53, envoyproxy/ratelimit's #1041); a refused one takes two, as before. Its inexactness, for such requests
 * only: between its count and its give-back, a refused request's hits hold room that another request may find
 * taken; the windows it gave back are then forgotten by every replica's over-limit cache, so none stays refused
 * past that moment. (envoyproxy/ratelimit's src/redis/fixed_cache_impl.go reads a request's keys first and counts
 * the others with 0 when one would go over: two round trips, and a stale read leaves the others' hits for good.)
 *
 * Any other request is first asked without writing ('peek') on every part; only when it fits everywhere is each
 * part counted, atomically within the part. A request that loses a race between the two phases (refused by a part
 * at its count) has what the other parts took given back (giveBack): its slots, its windows (quota-mode ones
 * too) and buckets; it keeps only its charges and reservations, as a refused request does. The count does not wait for a batch window (the peek
 * did). */
export function acrossParts(
  enqueue: Enqueue,
  mode: Pending['mode'],
  checks: readonly CounterCheck[],
  parts: number[][],
  queues: string[],
  trace?: TraceLink,
  urgent = false,
  atMs?: number,
): Promise<CheckResult> {
  const split: Split = { enqueue, checks, parts, queues, trace, urgent, atMs };
  // A give-back sent again slot by slot (a slot moved): refunds, never refused, so each part at once, at its time.
  if (atMs !== undefined) return Promise.all(toEveryPart(split, mode, checks, true)).then((r) => merge(checks, parts, r));
  if (mode === 'count' && checks.every(plain)) return countThenUndo(split);
  return peekThenCount(split, mode);
}

/** A request over several destinations, and how its parts are sent. */
interface Split {
  enqueue: Enqueue;
  checks: readonly CounterCheck[];
  parts: number[][];
  queues: string[];
  trace: TraceLink | undefined;
  urgent: boolean;
  /** A give-back's own time (Pending.atMs), else undefined. */
  atMs: number | undefined;
}

/** Each part of `of` (the request's checks, or checks made from them index for index) to its destination. */
function toEveryPart(x: Split, mode: Pending['mode'], of: readonly CounterCheck[], urgent: boolean): Promise<CheckResult>[] {
  return x.parts.map((idx, i) => x.enqueue(mode, pick(of, idx), x.queues[i]!, x.trace, urgent, x.atMs));
}

/** Whether a check's count can be given back as a refund: a window or a bucket, counted when admitted. */
const plain = (c: CounterCheck): boolean => !c.charge && !c.quota && !c.reservation && !c.slots && !ALGORITHMS[c.kind]!.slots;

async function countThenUndo(x: Split): Promise<CheckResult> {
  const settled = await Promise.allSettled(toEveryPart(x, 'count', x.checks, x.urgent));
  const failed = settled.find((p) => p.status === 'rejected');
  const results = settled.map((p) => (p.status === 'fulfilled' ? p.value : undefined));
  // A part that failed (Redis unreachable, timed out) decided nothing: the request fails (the failure policy
  // answers it), and what the other parts counted for it is given back.
  const out = failed ? undefined : merge(x.checks, x.parts, results as CheckResult[]);
  if (out?.admitted) return out;
  const givenBack = await giveBack(x, results);
  if (failed) throw failed.reason;
  out!.givenBack = givenBack;
  return out!;
}

/** What the admitted parts of a request that is refused (or failed) took, given back; the keys it went to. A
 * plain request's windows and buckets; any other's slots (by their id), windows (quota-mode ones too, which the
 * count counted as shadow) and buckets. A charge or a reservation stays: a refused request pays its charges, and
 * a reservation is settled or expires as any other. A window's give-back is decided at the time of its count
 * (Pending.atMs), so it lands in the window counted, never in the next; a bucket has no window to miss, and its
 * debt is read now, as are slots. Awaited, so that the answer comes after it, and the over-limit cache can forget
 * windows the count made look full (OverLimitCache.learn). A give-back that fails (Redis gone) leaves the hits
 * counted: a window that holds too much, never one that holds too little; its count stays in `merged` (a slot
 * held until its lease is reported taken), and its keys are not named as given back. */
async function giveBack(x: Split, results: readonly (CheckResult | undefined)[], merged?: CheckResult): Promise<string[]> {
  const calls: Promise<unknown>[] = [];
  const keys: string[] = [];
  results.forEach((r, i) => {
    // A refused part counted nothing; a failed one, unknown (a call that timed out may have counted): left so.
    if (!r?.admitted) return;
    const part = pick(x.checks, x.parts[i]!);
    // What the part counted (limits/check.ts: an admitted part counts each window of a group with no window over).
    const { groupOver } = settle(part, r.over);
    const back: CounterCheck[] = [];
    const at: number[] = [];
    part.forEach((c, j) => {
      const took = r.counted ? r.counted[j]! : groupOver[c.group] ? 0 : c.hits;
      const slots = ALGORITHMS[c.kind]!.slots;
      // Kept: what gave back, a charge (a refused request pays it; a slot's take is no charge), a reservation.
      if (took <= 0 || givesBack(c) || (c.charge && !slots) || c.reservation) return;
      back.push({ ...c, op: slots ? 'giveBack' : 'refund', hits: took, quota: false, charge: true });
      at.push(x.parts[i]![j]!);
    });
    const isWindow = (c: CounterCheck): boolean => !ALGORITHMS[c.kind]!.refills && !ALGORITHMS[c.kind]!.slots;
    for (const windows of [true, false]) {
      const sent = back.flatMap((c, k) => (isWindow(c) === windows ? [k] : []));
      if (sent.length === 0) continue;
      const call = x.enqueue('count', pick(back, sent), x.queues[i]!, undefined, true, windows ? r.nowMs : undefined);
      // Given back, so no longer counted in the answer, nor full for the over-limit cache.
      calls.push(
        call.then(() => {
          if (merged?.counted) for (const k of sent) merged.counted[at[k]!] = 0;
          for (const k of sent) keys.push(back[k]!.key);
        }),
      );
    }
  });
  await Promise.allSettled(calls);
  return keys;
}

/** A check a refused request still makes: a charge (a slot taken is not one; a give-back is). */
const paysWhenRefused = (c: CounterCheck): boolean => c.charge && (!ALGORITHMS[c.kind]!.slots || givesBack(c));

async function peekThenCount(x: Split, mode: Pending['mode']): Promise<CheckResult> {
  const { checks, parts } = x;
  const peeked = merge(checks, parts, await Promise.all(toEveryPart(x, 'peek', checks, x.urgent)));
  if (mode === 'peek') return peeked;
  const charges = checks.some(paysWhenRefused);
  if (!peeked.admitted && !charges) {
    // Refused with nothing written: what the peek says each part would count (a slot taken) was not counted.
    if (peeked.counted) peeked.counted = peeked.counted.map(() => 0);
    return peeked;
  }
  // Quota mode is a rule over the whole request, which no one slot sees: the peek settled it, so each
  // slot's count lets its quota descriptors block nothing (over, they are still not counted).
  let counted = checks.some((c) => c.quota) ? checks.map((c) => (c.quota ? { ...c, quota: false, shadow: true } : c)) : checks;
  // A refused request still pays its charges: the rest of it counts nothing and blocks nothing.
  // (A slot is not a charge: a refused request takes none.)
  if (!peeked.admitted) counted = counted.map((c) => (paysWhenRefused(c) ? c : { ...c, hits: 0, shadow: true }));
  const results = await Promise.all(toEveryPart(x, 'count', counted, true));
  const result = merge(checks, parts, results);
  if (!peeked.admitted) result.admitted = false;
  // Lost a race between the phases (a part full by the count that had room at the peek): what the other parts
  // took for it, given back, so a refused request keeps nothing but its charges.
  else if (!result.admitted) result.givenBack = await giveBack(x, results, result);
  return result;
}
