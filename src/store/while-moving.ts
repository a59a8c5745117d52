import { performance } from 'node:perf_hooks';
import { StoreMovingError } from '../errors.js';

/** A request a Cluster refused while failing over or moving a slot (StoreMovingError) is sent again after this
 * long: a slot moved is served by its new master within a few of these. */
const MOVING_RETRY_MS = 25;

/** `send`, sent again while it fails with StoreMovingError (the script wrote nothing) and `timeoutMs` from now
 * allows; past it the error stands: an outage, which the failure policy answers (a give-back kept and sent
 * again), never a refusal of the request's keys. One call at a time: none runs after its caller gave up. */
export async function whileMoving<T>(send: () => Promise<T>, timeoutMs: number, stopped: () => boolean): Promise<T> {
  const until = performance.now() + timeoutMs;
  for (;;) {
    try {
      return await send();
    } catch (err) {
      if (!(err instanceof StoreMovingError) || performance.now() + MOVING_RETRY_MS >= until || stopped()) throw err;
      await new Promise((resolve) => setTimeout(resolve, MOVING_RETRY_MS));
    }
  }
}
