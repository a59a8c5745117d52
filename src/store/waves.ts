/** Runs `run` on `items`, `width` at a time, one wave after the other: a long list never becomes that many
 * commands sent at once. Rejects with the first failure; no later wave starts (a frozen Redis is not sent the
 * rest). Used by the renewals and the census of in-flight slots. */
export async function inWaves<T>(items: readonly T[], width: number, run: (item: T) => Promise<void>): Promise<void> {
  for (let i = 0; i < items.length; i += width) await Promise.all(items.slice(i, i + width).map(run));
}
