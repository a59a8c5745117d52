import type { KindCode } from '../limits/kinds/index.js';
import type { Glob } from './glob.js';
import type { Algorithm, HeaderSpec, InFlightSpec, LimitKind, Metadata, UsageSpec } from './spec.js';
import type { Unit } from './units.js';

/** A window of a rule, compiled: everything a decision needs, computed once at load. */
export interface CompiledLimit {
  unit: Unit;
  /** The wire enum of RateLimitResponse.RateLimit.Unit. */
  unitCode: number;
  /** unit × unit_multiplier; a calendar month or year: its nominal 30 or 365 days (the real one varies). */
  windowSeconds: number;
  /** The window as its key names it (counters/keys.ts windowName): the unit, unless a multiplier or a calendar. */
  windowName: string;
  /** How the window is aligned (counters/calendar.ts): 0 epoch, -1 weeks from Monday, n months. */
  calendar: number;
  requestsPerUnit: number;
  /** The config's name, or one made up (`<domain>.<rule path>.per_<unit>`) for metrics, logs and replaces. */
  name: string;
  /** The config gave the name: only such a name goes to the client (DescriptorStatus.current_limit.name). */
  named: boolean;
  replaces: readonly string[];
  /** Resolved: the limit's own algorithm, else its rule's, else the domain's; `in_flight` for slots (then
   * requestsPerUnit is the slots and windowSeconds the lease). */
  algorithm: LimitKind;
  /** The algorithm's code (kinds.ts): what a check of this limit carries. */
  kind: KindCode;
  /** token_bucket: the capacity in requests (default requestsPerUnit); 0 for windows. */
  burst: number;
}

/** The limits attached to one node of the descriptor tree. */
export interface Rule {
  domain: string;
  /** The descriptor path, e.g. category_read.token: stable across reloads, used in keys and metrics. */
  id: string;
  /** The rule's part of every counter key: domain and id, escaped so config text cannot forge a separator. */
  counterId: string;
  /** Where the rule was written, for check-config and explanations. */
  source: string;
  limits: readonly CompiledLimit[];
  unlimited: boolean;
  shadow: boolean;
  /** quota_mode: a soft limit. Over it, the request is still admitted unless every quota-mode descriptor of
   * the request is over too (or a normal one is): envoyproxy/ratelimit's src/service/ratelimit.go. */
  quota: boolean;
  /** charge_mode: a request's hits > 0 are a charge, counted in full even past the limit (limits/check.ts). */
  charge: boolean;
  /** The entry key that names a reservation on this rule's counter (never part of the counter), and how long
   * an unsettled one is kept; undefined when the rule takes no reservations. */
  reservationKey: string | undefined;
  reservationTtlMs: number;
  /** The entry key that names the reservation at the stream's end: a settlement, or with nothing to settle a
   * plain charge (counted once); never a new reservation. */
  settlementKey: string | undefined;
  /** `in_flight`: the rule counts requests at once, not per window (its one limit is the slots). */
  inFlight: InFlightSpec | undefined;
  /** `usage`: the rule's charges, settlements, refunds and expired reservations go to the usage ledger. */
  usage: UsageSpec | undefined;
  /** `refunds: false`: Envoy's is_negative_hits gives nothing back here, and is counted as ignored. */
  refunds: boolean;
  /** The descriptor's `metadata`, returned (merged) in the response's dynamic_metadata when it passed. */
  metadata: Metadata | undefined;
  algorithm: Algorithm;
  tierLimits: ReadonlyMap<string, readonly CompiledLimit[]>;
  /** The entry key at each position of the rule's path. */
  keys: readonly string[];
  /** Per entry position: true where the value was matched by a wildcard or default key, so it is part of
   * the counter's identity (every distinct value has its own counter); false where the config fixes it, or
   * where a wildcard has share_threshold (every value it matches shares the counter). */
  variable: readonly boolean[];
  /** Per entry position: the value the config fixes (an exact match), else undefined (wildcard, default key). */
  exactValues: readonly (string | undefined)[];
  /** The value of the rule's first entry when the config fixes it (the property API's category: read,
   * reports, write), else empty. A metrics label. */
  category: string;
}

export interface MatchNode {
  /** Where the descriptor was written (file:line), for explanations. */
  source: string;
  rule: Rule | undefined;
  children: ReadonlyMap<string, KeyBranch> | undefined;
}

/** The nodes under one key: exact values first, then wildcard values (the first that matches, in the
 * order the config lists them, as envoyproxy/ratelimit's GetLimit tries them), then the default. */
export interface KeyBranch {
  exact: ReadonlyMap<string, MatchNode>;
  patterns: readonly WildcardNode[];
  any: MatchNode | undefined;
}

export interface WildcardNode {
  /** The value as written, e.g. `files/*` or `foo*bar*baz`. */
  pattern: string;
  glob: Glob;
  /** share_threshold: every value it matches counts on one counter. */
  shared: boolean;
  node: MatchNode;
}

export interface CompiledDomain {
  name: string;
  file: string;
  /** The config's `response_headers:`, undefined when it does not say (response/header-policy.ts decides). */
  headers: HeaderSpec | undefined;
  tiers: ReadonlySet<string>;
  tokenKey: string;
  root: ReadonlyMap<string, KeyBranch>;
  rules: readonly Rule[];
  /** `file:line: key: note` for what loads but has no effect (detailed_metric): logged at load. */
  notes: readonly string[];
  /** Sent by an xDS server beside other sources (config/domain-owners.ts): answered as envoyproxy/ratelimit's. */
  fromXds?: true;
  /** USE_CALENDAR_MONTH_RATE_LIMIT: Envoy's own MONTH limits count in calendar months too. */
  calendarMonths?: boolean;
  /** The reservation keys of its rules: empty for almost every domain, so planning looks for a request id
   * only where one can matter. */
  reservationKeys: ReadonlySet<string>;
  /** The request_key of its in_flight rules (planned like reservation keys: the last entry, not counted). */
  slotKeys: ReadonlySet<string>;
}

export interface CompiledConfig {
  domains: ReadonlyMap<string, CompiledDomain>;
  /** Short hash of the source files, to tell configs apart in logs and metrics. */
  hash: string;
  /** No config yet: the first from an xDS server has not arrived (load.ts, pendingConfig); with several
   * sources, a domain none has sent is answered as if there were no config (config/domain-owners.ts). */
  pending?: true;
}
