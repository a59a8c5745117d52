import { KIND_CODES } from '../../config/kinds.js';
import type { LimitAlgorithm } from './algorithm.js';
import { fixedWindow } from './fixed-window.js';
import { inFlight } from './in-flight.js';
import { slidingWindow } from './sliding-window.js';
import { tokenBucket } from './token-bucket.js';

/** Every limit algorithm, indexed by its code (a check's `kind`): the one place a kind is registered. A new
 * one is a module beside these, its code in config/kinds.ts, and a Lua include (lua/, check-and-incr.lua's
 * shapes name it by the same code). */
export const ALGORITHMS: readonly LimitAlgorithm[] = [fixedWindow, slidingWindow, tokenBucket, inFlight];

for (const [i, a] of ALGORITHMS.entries()) {
  if (a.code !== i || KIND_CODES[a.kind] !== i) throw new Error(`algorithm ${a.kind} registered at ${i}, coded ${a.code}`);
}
