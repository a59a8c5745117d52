/** Max-min fair shares of a rate among instances (water-filling, as Doorman's FairShare algorithm): an
 * instance asking for less than an equal split gets what it asks, the capacity left over is split equally
 * among the others, and so on until every instance either has what it asked for or holds the same share as
 * every other unsatisfied one. Capacity nobody asked for is then split equally among all, so an instance
 * whose demand grows is not held to its last report until the next one. The shares never sum to more than
 * the capacity: the property the fleet's accuracy rests on.
 *
 * `demands` are requests per second; Infinity means not known yet (an instance's first report): such an
 * instance takes an equal share of what is left, as the busiest would. */
export function fairShares(capacity: number, demands: readonly number[]): number[] {
  const { level, spare } = waterLevel(capacity, demands);
  return demands.map((d) => (capacity > 0 ? Math.min(Math.max(d, 0), level) + spare : 0));
}

/** The water level of max-min fair shares: every demand above it gets the level, every one below gets itself;
 * Infinity when every demand fits, and then `spare` is the capacity left over, split equally. One numeric sort
 * and one pass: quota-share.lua computes the same, step for step, so both stores grant the same digits. */
export function waterLevel(capacity: number, demands: readonly number[]): { level: number; spare: number } {
  const n = demands.length;
  if (n === 0 || !(capacity > 0)) return { level: 0, spare: 0 };
  const sorted = demands.map((d) => Math.max(d, 0)).sort((a, b) => a - b);
  let left = capacity;
  for (let k = 0; k < n; k++) {
    const equal = left / (n - k);
    if (sorted[k]! >= equal) return { level: equal, spare: 0 };
    left -= sorted[k]!;
  }
  return { level: Infinity, spare: left / n };
}

/** The demand an instance is planned for when its buckets share one counter and one grant is split among them:
 * what it reported, with room to grow (a fifth more, and one request a second). */
export function plannedDemand(ratePerSecond: number): number {
  return ratePerSecond * 1.2 + 1;
}

/** What the headroom of the instances under the water level may sum to, as a share of the capacity: the grants in
 * force may sum to (1 + HEADROOM_POOL) times it, while what they are expected to admit (each its demand, or the
 * level) sums to the capacity. */
export const HEADROOM_POOL = 0.1;
/** A grant that moves less than this share of what its Envoy runs is left as it is: a changed token bucket may
 * start full (Envoy releases differ), which costs up to its burst, so a change must be worth more than that. */
export const HYSTERESIS = 0.1;
/** A demand whose move shifts the fleet's planned sum by more than this share of the capacity re-plans the table
 * at once; smaller moves wait for the next periodic re-plan. */
export const REPLAN_SHIFT = 0.02;

/** An instance's headroom above its demand, when under the level: a tenth of it, at least half a request a second
 * (so a demand measured a little low over one interval is still served). */
function headroomOf(demand: number): number {
  return Math.max(0.5, demand * 0.1);
}

/** A bucket's plan, computed from every live entry's demand at once and kept beside them, so that each report
 * of one instance costs O(1): its water level, the spare split among all when every demand fits, and the factor
 * that holds the headroom of those under the level to HEADROOM_POOL of the capacity. */
export interface SharePlan {
  capacity: number;
  level: number;
  spare: number;
  scale: number;
}

/** The plan of a table whose demands (Infinity: not known yet) are `demands`, in the table's order with the
 * caller's first: quota-share.lua adds in the same order, so both stores plan the same digits. */
export function planShares(capacity: number, demands: readonly number[]): SharePlan {
  if (!(capacity > 0)) return { capacity, level: 0, spare: 0, scale: 0 };
  const { level, spare } = waterLevel(capacity, demands);
  if (level === Infinity) return { capacity, level, spare, scale: 0 };
  // Added in sorted order: a Redis hash's order is not its writes' once it grows, and a sum's digits follow its order.
  const sorted = demands.map((d) => Math.max(d, 0)).sort((a, b) => a - b);
  let want = 0;
  for (const d of sorted) if (d < level) want += Math.min(level - d, headroomOf(d));
  const pool = capacity * HEADROOM_POOL;
  return { capacity, level, spare, scale: want > pool ? pool / want : 1 };
}

/** An instance's fair share under a plan: the level if its demand reaches it; else its demand, its headroom
 * (scaled to the pool, never past the level) and the spare. */
export function fairOf(plan: SharePlan, demand: number): number {
  if (!(plan.capacity > 0)) return 0;
  const d = Math.max(demand, 0);
  if (d >= plan.level) return plan.level;
  return d + plan.spare + Math.min(plan.level - d, headroomOf(d)) * plan.scale;
}

/** Whether a demand moved enough, under a plan, to re-plan the table now: a demand learnt or forgotten, or one
 * whose part of the planned sum (itself, or the level) moved by more than REPLAN_SHIFT of the capacity. */
export function demandMoved(plan: SharePlan, before: number, after: number): boolean {
  if (before === Infinity || after === Infinity) return before !== after;
  const part = (d: number): number => Math.min(Math.max(d, 0), plan.level);
  return Math.abs(part(after) - part(before)) > REPLAN_SHIFT * plan.capacity;
}

/** One instance's entry in a bucket's share table. */
export interface ShareEntry {
  instance: string;
  /** Its demand, requests a second; Infinity when not known yet. */
  demand: number;
  /** The rate it was last granted, which its Envoy may be running now. */
  assigned: number;
}

/** What an instance may be granted now under `plan`: its fair share, but never more than what the others' grants
 * (`heldByOthers`) leave of (1 + HEADROOM_POOL) times the capacity, nor than `limit` (what its Envoy runs, while
 * its table is rebuilt after a loss). A grant within HYSTERESIS of what its Envoy runs (`running`) stays what it
 * runs, so its bucket is not changed for nothing. quota-share.lua computes the same, line for line. */
export function grantUnder(
  plan: SharePlan,
  demand: number,
  heldByOthers: number,
  running: number,
  limit = Infinity,
  capacity = plan.capacity,
): { grant: number; fair: number } {
  const fair = fairOf(plan, demand);
  // The room from the capacity now: a plan made under a capacity up to 2 % higher must not lend it.
  const room = capacity + capacity * HEADROOM_POOL - heldByOthers;
  let grant = Math.min(Math.max(0, Math.min(fair, room)), limit);
  if (running > 0 && running <= limit && Math.abs(grant - running) <= HYSTERESIS * running) grant = running;
  return { grant, fair };
}

/** What a table records an instance holds: `rate` rounded up to a multiple of 2^-20, so that sums of what entries
 * hold are exact whatever the order they are added in (a Redis hash's order is not its writes' once it grows). */
export function heldOf(rate: number): number {
  return Math.ceil(rate * 1_048_576) / 1_048_576;
}

/** The grant of an instance from the whole table at once (a fresh plan): what the share stores compute when
 * they re-plan. */
export function reserve(capacity: number, demand: number, others: readonly ShareEntry[], limit = Infinity, running = 0): { grant: number; fair: number } {
  const plan = planShares(capacity, [demand, ...others.map((o) => o.demand)]);
  let held = 0;
  for (const o of others) held += o.assigned;
  return grantUnder(plan, demand, held, running, limit);
}
