import type { CheckResult, CounterCheck, CounterWindow } from '../limits/check.js';

export interface StoreHealth {
  degraded: boolean;
  reason: string | undefined;
}

/** An answer now, or later. A store that can answer at once (the memory store, a cached over-limit window)
 * returns it as it is: a decision then allocates no promise and waits for no microtask. */
export type Maybe<T> = T | Promise<T>;

/** What a store round trip is traced under: opaque to stores, made and read by tracing/ (a sampled
 * decision's span context). Absent for every decision that is not sampled. */
export type TraceLink = object;

/** Traces the round trips a store makes for several decisions at once (a Redis batch): one span, linked to
 * every sampled decision it carried. */
export interface BatchTracer {
  start(links: readonly TraceLink[], size: { requests: number; keys: number }): BatchSpan;
}

export interface BatchSpan {
  /** `failure`: what kind of failure ended the round trip (an error class name), never a value. */
  end(failure?: string): void;
}

/** A slot a keeper renews (limiter/slot-keeper.ts): its counter's slots key, its holder (a request id's
 * fingerprint), the lease each renewal gives, and when renewals stop (its take's time + the rule's max_hold). */
export interface HeldSlot {
  key: string;
  id: string;
  leaseMs: number;
  endMs: number;
}

/** What one renewal of a peer's slots did: slots held and renewed, and entries dropped from the peer's list
 * (given back, ended by their lease, or at their max_hold). */
export interface Renewal {
  renewed: number;
  dropped: number;
}

/** Slots renewed while the Envoy that took them stays connected (docs/in-flight.md, "Long streams"): listed
 * per peer (an Envoy, by fingerprint), in the store, so that any replica it connects to renews them. */
export interface SlotLeases {
  /** Adds holders to the peer's list; returns how many did not fit its bound (they keep their one lease). */
  note(peer: string, held: readonly HeldSlot[]): Promise<number>;
  /** Renews each listed holder that still holds its slots, to min(now + lease, end); drops the rest. */
  renew(peer: string): Promise<Renewal>;
  /** Moves a peer's list onto another's (a connection's slots onto its Envoy's, when this replica stops);
   * returns how many did not fit. */
  move(from: string, to: string): Promise<number>;
}

/** Holders one peer's list keeps, at most: what a renewal reads. Past it, a slot keeps its one lease. */
export const MAX_PEER_SLOTS = 10_000;

/** Checks and counts all windows of a request atomically: a rejected request consumes nothing. */
export interface Store {
  /** Renewal of slots whose rule has max_hold (limiter/slot-keeper.ts). */
  readonly slotLeases?: SlotLeases;
  readonly kind: string;
  /** `trace`: the sampled decision this call serves, passed on to the store's BatchTracer (tracing/). */
  check(checks: readonly CounterCheck[], trace?: TraceLink): Maybe<CheckResult>;
  /** Whether the store can answer now; the memory store always can. */
  health(): StoreHealth;
  /** Forgets these counters (current and previous window). Returns how many existed. */
  reset(windows: readonly CounterWindow[]): Promise<number>;
  close(): Promise<void>;
}
