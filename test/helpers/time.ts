/** Real-time helpers for tests that are about real time (Redis's clock, reloads, propagation). */

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Waits until just after a second boundary, so a burst lands in one window. */
export const startOfSecond = (): Promise<void> => sleep(1000 - (Date.now() % 1000) + 5);

/** Polls `cond` every 20 ms; returns how many milliseconds it took to hold, or fails past `ms`. */
export async function within(ms: number, cond: () => boolean | Promise<boolean>): Promise<number> {
  const start = Date.now();
  while (!(await cond())) {
    if (Date.now() - start > ms) throw new Error(`not within ${ms} ms`);
    await sleep(20);
  }
  return Date.now() - start;
}
