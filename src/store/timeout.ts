import { performance } from 'node:perf_hooks';

/** A call that did not answer in time. `lateMs`: how late the timer itself fired; a large value means this
 * process was too busy to notice the answer, not that the other side is slow. */
export class TimeoutError extends Error {
  override readonly name = 'TimeoutError';
  constructor(
    readonly ms: number,
    readonly lateMs: number,
  ) {
    super(`Command timed out after ${ms} ms`);
  }
}

/** A hard bound on one call, whatever the client does internally (cluster redirects, reconnects).
 *
 * When the timer fires, the verdict waits for the end of the current event-loop turn (setImmediate runs after
 * the poll phase): Node runs due timers before it reads sockets, so under load a reply that already arrived
 * would otherwise be declared late.
 *
 * `graceMs`: a timer that fires late shows this process (or the whole machine) was not running; the time it
 * could not use to read a reply is added to the wait, up to `graceMs` in all. A server that is really silent
 * still fails after `ms` when this process is idle. */
export function withTimeout<T>(p: Promise<T>, ms: number, graceMs = 0): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    const start = performance.now();
    let due = start + ms;
    const onTimer = (): void => {
      const now = performance.now();
      const extra = Math.min(now - due, start + ms + graceMs - now);
      if (extra >= 1) {
        due = now + extra;
        timer = setTimeout(onTimer, extra);
        return;
      }
      setImmediate(() => {
        if (settled) return;
        settled = true;
        reject(new TimeoutError(ms, now - start - ms));
      });
    };
    let timer = setTimeout(onTimer, ms);
    p.then(
      (v) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        resolve(v);
      },
      (e: unknown) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        reject(e as Error);
      },
    );
  });
}
