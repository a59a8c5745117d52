import type { CheckResult, CounterCheck, CounterWindow } from '../limits/check.js';
import type { SpendTop } from './spend-top.js';

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

/** One counter of an in_flight rule as a census found it: its slots key, the slots held, and its limit (a
 * tier's for a client in one, as its last take saw it). */
export interface CensusCounter {
  key: string;
  held: number;
  limit: number;
}

/** What a census of one rule found: slots held over its counters, leases it ended, the counters it read (at
 * most MAX_CENSUS: `partial` when the rule had more), and the `top` nearest their limit, fullest first. */
export interface Census {
  held: number;
  expired: number;
  counters: number;
  partial: boolean;
  top: CensusCounter[];
}

/** Counters of an in_flight rule read in one census, at most. */
export const MAX_CENSUS = 10_000;
/** Counters an in_flight rule lists for its census, at most: a flood of takes on invented tenants lists each
 * until a census drops those that hold nothing; past this, a take is not listed (its next one may be). */
export const MAX_LISTED = 100_000;

/** In-flight slots counted where they are (limiter/slot-census.ts): each rule lists the counters that took
 * slots; a census ends their ran-out leases (as a take would) and reads what each holds. */
export interface SlotCensus {
  /** A counter of `rule` that took slots, and its limit then. */
  note(rule: string, key: string, limit: number, keepMs: number): Promise<void>;
  /** Every listed counter: leases ended, held read; counters that hold none leave the list. */
  count(rule: string, top: number): Promise<Census>;
  /** The rules of the config in force: lists of others (a reload removed their rule) may go now. A store whose
   * lists expire by themselves (Redis) has none. */
  retain?(rules: readonly string[]): void;
}

/** Checks and counts all windows of a request atomically: a rejected request consumes nothing. */
export interface Store {
  /** Renewal of slots whose rule has max_hold (limiter/slot-keeper.ts). */
  readonly slotLeases?: SlotLeases;
  /** The census of in_flight rules (limiter/slot-census.ts). */
  readonly slotCensus?: SlotCensus;
  /** The counters of charge_mode rules nearest their limit, kept with each charge (spend-top.ts). */
  readonly spendTop?: SpendTop;
  readonly kind: string;
  /** `trace`: the sampled decision this call serves, passed on to the store's BatchTracer (tracing/). */
  check(checks: readonly CounterCheck[], trace?: TraceLink): Maybe<CheckResult>;
  /** Whether the store can answer now; the memory store always can. */
  health(): StoreHealth;
  /** Forgets these counters (current and previous window). Returns how many existed. */
  reset(windows: readonly CounterWindow[]): Promise<number>;
  close(): Promise<void>;
}
