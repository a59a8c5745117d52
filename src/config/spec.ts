import { ALGORITHMS as KINDS, type LimitKind } from '../limits/kinds/index.js';
import type { Unit } from './units.js';

/** The validated (not yet compiled) shape of one descriptor config file. */

/** What a compiled limit counts: a window of an algorithm, or slots in flight (a descriptor's `in_flight`). */
export type { LimitKind } from '../limits/kinds/index.js';
/** What a config's `algorithm` may name: every registered kind but the one a descriptor's `in_flight` makes. */
export type Algorithm = Exclude<LimitKind, 'in_flight'>;
export const ALGORITHMS = KINDS.filter((a) => !a.slots).map((a) => a.kind as Algorithm);

/** A descriptor's `in_flight`: at most `limit` requests at once over every replica; a slot nobody gives back
 * returns after `leaseMs`; `requestKey` names the entry whose value (a request id) names the request. */
export interface InFlightSpec {
  limit: number;
  leaseMs: number;
  requestKey: string | undefined;
  /** `max_hold`: a request's slot is renewed, a lease at a time, while the Envoy that took it stays connected,
   * up to this long after its take (limiter/slot-keeper.ts); undefined = the lease is the most it is held. */
  maxHoldMs?: number;
  /** `tier_limits: {TIER: {limit: N}}`: the slots of a client in a tier, instead of `limit`. */
  tiers?: ReadonlyMap<string, number>;
}

export interface LimitSpec {
  unit: Unit;
  requestsPerUnit: number;
  /** Names make limits replaceable and show up in DescriptorStatus.current_limit.name. */
  name: string | undefined;
  replaces: string[];
  /** The limit's own algorithm, which wins over its rule's (and the domain's). */
  algorithm?: Algorithm | undefined;
  /** token_bucket only: the bucket's capacity; undefined = requestsPerUnit. */
  burst?: number | undefined;
  /** Windows aligned to UTC calendar boundaries (day, week from Monday, month, year): fixed windows only. */
  calendar?: boolean | undefined;
  /** Windows of this many units (Envoy's proposed RateLimit.unit_multiplier, PR #47307); undefined = 1. */
  unitMultiplier?: number | undefined;
}

/** A descriptor's `metadata`: a free mapping, as JSON holds it (envoyproxy/ratelimit turns it into a
 * google.protobuf.Struct). */
export type Metadata = { [key: string]: MetadataValue };
export type MetadataValue = string | number | boolean | null | MetadataValue[] | Metadata;

export interface DescriptorSpec {
  key: string;
  /** undefined: every value gets its own counters; holding '*': a wildcard (src/config/glob.ts). */
  value: string | undefined;
  /** share_threshold: every value the wildcard matches counts on one counter. */
  shareThreshold: boolean;
  quota: boolean;
  /** charge_mode: hits > 0 are a charge for work done, counted in full even past the limit. */
  charge: boolean;
  /** charge_mode only: the entry key whose value names a reservation (a request id), and how long an
   * unsettled reservation is kept. */
  reservationKey: string | undefined;
  reservationTtlMs: number;
  /** The entry key that names the same reservation at the stream's end (a settlement, never a new
   * reservation); undefined: the reservation_key's next call settles. */
  settlementKey: string | undefined;
  metadata: Metadata | undefined;
  /** `in_flight`, instead of rate limits. */
  inFlight: InFlightSpec | undefined;
  /** `refunds: false`: is_negative_hits on this rule is ignored (counted). */
  refunds?: false;
  /** `usage: {values: […]}`: the rule's charges go to the usage ledger, these keys' values verbatim. */
  usage?: UsageSpec;
  line: number;
  /** The file it was written in, when not its domain's (MERGE_DOMAIN_CONFIG merged it in). */
  file?: string;
  limits: LimitSpec[];
  unlimited: boolean;
  shadow: boolean;
  algorithm: Algorithm | undefined;
  tierLimits: Map<string, LimitSpec[]>;
  children: DescriptorSpec[];
}

export type HeaderStyle = 'x-ratelimit' | 'draft' | 'none';

export interface HeaderSpec {
  style: HeaderStyle;
  limit: string;
  remaining: string;
  reset: string;
  /** Which matched window the headers report: the longest (the property API's hourly limit) or the one
   * closest to running out. */
  window: 'longest' | 'tightest';
  /** What the limits count, as the 429 body's detail says it ("1000000 tokens per hour"). */
  units: string;
}

export const DEFAULT_HEADERS: HeaderSpec = {
  style: 'x-ratelimit',
  limit: 'X-RateLimit-Limit',
  remaining: 'X-RateLimit-Remaining',
  reset: 'X-RateLimit-Reset',
  window: 'longest',
  units: 'requests',
};

export interface DomainSpec {
  domain: string;
  file: string;
  /** Line of the domain key, to point at a domain defined twice. */
  line: number;
  /** `response_headers:`, undefined when the file does not say. */
  headers: HeaderSpec | undefined;
  tiers: string[];
  /** The descriptor entry whose value identifies a client (its fingerprint selects the tier). */
  tokenKey: string;
  algorithm: Algorithm;
  descriptors: DescriptorSpec[];
  /** Loads, but worth a word: `file:line: key: note` (keys that have no effect in Tollgate). */
  notes: string[];
  /** USE_CALENDAR_MONTH_RATE_LIMIT: its MONTH limits count in calendar months (config/calendar-months.ts). */
  calendarMonths?: boolean;
}

/** A charge_mode rule's usage ledger (config/validate-usage.ts): the keys whose values a ledger line carries as
 * given (bounded, plain text only); every other value of the descriptor goes as its fingerprint. */
export interface UsageSpec {
  values: readonly string[];
}
