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

/** The demand an instance is planned for: what it reported, with room to grow (a fifth more, and one request a
 * second), so that an instance under its fair share is not clipped by the noise of one report interval. */
export function plannedDemand(ratePerSecond: number): number {
  return ratePerSecond * 1.2 + 1;
}

/** One instance's entry in a bucket's share table. */
export interface ShareEntry {
  instance: string;
  /** Planned demand, requests a second; Infinity when not known yet. */
  demand: number;
  /** The rate it was last granted, which its Envoy may be running now. */
  assigned: number;
}

/** What an instance may be granted now: its fair share of `capacity` among every live entry (its own demand
 * first), but never more than what the others' grants leave, nor than `limit`. So the grants in force never sum
 * to more than the capacity, even while demand moves: an instance that joins gets room as the others shrink (at
 * their next report, or at once when told of the change), not before. `limit` is what the instance's Envoy runs
 * now while its table is rebuilt after a loss (the others' entries may be missing: no grant may grow until they
 * are back). quota-share.lua computes the same, line for line. */
export function reserve(capacity: number, demand: number, others: readonly ShareEntry[], limit = Infinity): { grant: number; fair: number } {
  const fair = fairShares(capacity, [demand, ...others.map((o) => o.demand)])[0]!;
  let held = 0;
  for (const o of others) held += o.assigned;
  return { grant: Math.min(Math.max(0, Math.min(fair, capacity - held)), limit), fair };
}
