import { performance } from 'node:perf_hooks';

/** A call that did not answer in time. `lateMs`: how late the timer itself fired; a large value means this
 * process was too busy to notice the answer, not that the other side is slow. */
export class TimeoutError extends Error {
  override readonly name = 'TimeoutError';
  constructor(readonly ms: number, readonly lateMs: number) {
    super(`Command timed out after ${ms} ms`);
  }
}

/** A hard bound on one call, whatever the client does internally (cluster redirects, reconnects).
 *
 * When the timer fires, the verdict waits for the end of the current event-loop turn (setImmediate runs after
 * the poll phase): Node runs due timers before it reads sockets, so under load a reply that already arrived
 * would otherwise be declared late. */
export function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    const due = performance.now() + ms;
    const timer = setTimeout(() => {
      const lateMs = performance.now() - due;
      setImmediate(() => {
        if (settled) return;
        settled = true;
        reject(new TimeoutError(ms, lateMs));
      });
    }, ms);
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
