/** Real-time helpers for tests that are about real time (Redis's clock, reloads, propagation). */

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Waits until just after a second boundary, so a burst lands in one window. */
export const startOfSecond = (): Promise<void> => sleep(1000 - (Date.now() % 1000) + 5);

/** `p`, or a failure naming `what` once `ms` have passed: a wait that can hang fails as itself, with its
 * own bound, instead of as the test's timeout with no word on which wait it was. */
export async function bounded<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([p, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** Polls `cond` every 20 ms; returns how many milliseconds it took to hold, or fails past `ms`. The
 * condition's own calls are bounded too (one that hangs fails here, naming `what`, not as the test's
 * timeout): by what is left of `ms` plus the 5 s an RLS call of the test client may take itself. */
export async function within(ms: number, cond: () => boolean | Promise<boolean>, what = 'condition'): Promise<number> {
  const start = Date.now();
  const deadline = start + ms;
  while (!(await bounded(Promise.resolve(cond()), Math.max(0, deadline - Date.now()) + 5000, what))) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms`);
    await sleep(20);
  }
  return Date.now() - start;
}

/** Runs `run` from the start of a second and returns its result if it ended within that second; otherwise
 * (a slow moment on a loaded machine) runs it again from the next one, at most 3 times in all. `attempt`
 * lets the caller take fresh tokens each time, so a spilled attempt leaves nothing behind. */
export async function inOneSecond<T>(run: (attempt: number) => Promise<T>): Promise<T> {
  for (let attempt = 0; attempt < 3; attempt++) {
    await startOfSecond();
    const second = Math.floor(Date.now() / 1000);
    const out = await run(attempt);
    if (Math.floor(Date.now() / 1000) === second) return out;
  }
  throw new Error('could not fit the calls into one second in 3 attempts');
}
