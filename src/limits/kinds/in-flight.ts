import { SLOTS } from '../../config/kinds.js';
import { slotsKey } from '../../counters/keys.js';
import type { LimitAlgorithm } from './algorithm.js';

/** What a refused in-flight request is told to wait, and when its slots are said to reset: a slot comes back
 * when any request of the tenant ends, which no counter predicts; the lease is only the worst case. */
export const SLOT_WAIT_MS = 1000;

/** In-flight slots (an `in_flight` rule): at most `limit` held at once, each for at most its lease
 * (windowMs). Holders are kept by memory-slots.ts and lua/slots.lua; decided in charge-rules.ts. */
export const inFlight: LimitAlgorithm = {
  kind: 'in_flight',
  code: SLOTS,
  storeKey: (counterKey) => slotsKey(counterKey),
  used: (_c, held) => held,
  exceeds: (c, held, n) => held + n > c.limit,
  refundable: (_c, held) => held,
  holdsSince: () => true,
  remaining: (c, held, _prev, counted) => Math.max(0, c.limit - held - counted),
  pastLimit: (c, held, _prev, counted) => held + counted - c.limit,
  resetAtMs: (_c, _held, _counted, nowMs) => nowMs + SLOT_WAIT_MS,
  waitMs: () => SLOT_WAIT_MS,
  taken: (_c, held) => held,
  series: undefined,
};
