import type { CensusCounter } from './store.js';

/** The `n` counters nearest their limit (the largest share of it held), fullest first; ties by key, so every
 * store lists the same. */
export function nearestLimit(counters: readonly CensusCounter[], n: number): CensusCounter[] {
  const share = (c: CensusCounter): number => c.held / c.limit;
  return [...counters].sort((a, b) => share(b) - share(a) || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0)).slice(0, n);
}
