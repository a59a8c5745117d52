import { slotsKey } from '../../counters/keys.js';
import type { CounterCheck } from '../check.js';
import type { LimitAlgorithm, LimitShape } from './algorithm.js';

/** What a refused in-flight request is told to wait, and when its slots are said to reset: a slot comes back
 * when any request of the tenant ends, which no counter predicts; the lease is only the worst case. */
export const SLOT_WAIT_MS = 1000;

/** What an in-flight check weighs against a script call's keys: up to 100 leases ended and 100 holders given
 * back (slots.lua), where a window is one command. At most 32 go in one script call (store/batch-queues.ts), so
 * a flood of 64-take calls runs a script of its own each, a few ms, never one of 100 ms that other clients'
 * calls wait behind. */
export const SLOT_WEIGHT = 16;

/** In-flight slots (an `in_flight` rule): at most `limit` held at once, each for at most its lease
 * (windowMs). Holders are kept by memory-slots.ts and lua/slots.lua; decided in charge-rules.ts. */
export const inFlight = {
  kind: 'in_flight' as const,
  slots: true,
  refills: false,
  readsPrevious: false,
  plainCount: false,
  calendar: false,
  configKeys: [],
  weight: SLOT_WEIGHT,
  burstOf: () => 0,
  exact: () => true,
  capacity: (l: LimitShape) => l.requestsPerUnit,
  per: () => 'at once',
  shown: () => ({}),
  turnMs: () => SLOT_WAIT_MS,
  spanStartMs: (_c: CounterCheck, nowMs: number) => nowMs,
  // Never cached: the store answers every take and give-back.
  fromCache: (): [number, number] => [0, 0],
  storeKey: (counterKey) => slotsKey(counterKey),
  used: (_c, held) => held,
  exceeds: (c, held, n) => held + n > c.limit,
  share: (c, held) => held / c.limit,
  refundable: (_c, held) => held,
  holdsSince: () => true,
  remaining: (c, held, _prev, counted) => Math.max(0, c.limit - held - counted),
  pastLimit: (c, held, _prev, counted) => held + counted - c.limit,
  resetAtMs: (_c, _held, _counted, nowMs) => nowMs + SLOT_WAIT_MS,
  waitMs: () => SLOT_WAIT_MS,
  taken: (_c, held) => held,
  series: undefined,
} satisfies LimitAlgorithm;
