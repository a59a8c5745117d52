/** A deterministic stream of numbers in [0, 1) (Park and Miller's minimal standard generator): tests that
 * charge at random replay the same draws every run. */
export function randomFrom(seed: number): () => number {
  let s = seed;
  return () => {
    s = (s * 48271) % 2147483647;
    return s / 2147483647;
  };
}
