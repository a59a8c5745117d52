import { cachedFingerprint } from '../fingerprint.js';

/** Every name a counter goes by, built here and nowhere else. The limiter, the stores, the config compiler
 * and the admin API all read or write these keys, so the format lives below all of them.
 *
 *   counter id    <domain>:<rule path>             the rule's part, computed once at load
 *   counter key   <counter id>:{<fp>.<fp>…}        a rule with varying values: one fingerprint per value the
 *                                                  rule does not fix (wildcards, default keys), in entry order
 *                 {<counter id>}                   a rule that fixes every value: one counter for everyone
 *   override id   <domain>:~override:<fp>          Envoy's per-descriptor limit on a descriptor no rule
 *                                                  matches; <fp> is the fingerprint of its entry keys. The
 *                                                  ':' after ~override is one no rule path can hold (encoded)
 *   window key    <counter key>:<window>           one window of a counter: its unit (second, minute, …), with
 *                                                  `.x<N>` for N units (unit_multiplier) and `.cal` for calendar
 *                                                  windows (month.cal, week.x2.cal), so a 30-day month and a
 *                                                  calendar month never share counters
 *   bucket key    <counter key>:<unit>.bucket      a token bucket: its own key, so switching a limit between
 *                                                  a window and a bucket starts it fresh, never misread
 *   store key     <prefix>v<N>:<window key>        the Redis store adds --redis-key-prefix and the layout
 *                                                  version: a release whose keys or counter values differ
 *                                                  takes the next N, so two releases sharing one Redis during
 *                                                  a rolling upgrade never read each other's counters (each
 *                                                  counts apart until the old one is gone)
 *   counter name  <store key>:<i>                  layout 2: one plain Redis string per window, i the window's
 *                                                  index since the epoch (start / length); check-and-incr.lua
 *                                                  builds these from the store key, as windowCounterName does.
 *                                                  A bucket's counter is its store key itself
 *   reservations  <counter key>:rsv                a charge-mode descriptor's reservations (a Redis hash: request
 *                                                  id fingerprint → state, estimate, time), and
 *                  <counter key>:rsv.exp            the open ones' expiries, and
 *                  <counter key>:rsv.done           the ended ones' (refused, settled, forgotten unsettled):
 *                                                  sorted sets, check-and-incr.lua's (lua/charges.lua)
 *   demand key    <counter key>:rlqs               an RLQS bucket's demand table (a Redis hash: instance
 *                                                  fingerprint → demand and expiry; quota-share.lua). No
 *                                                  unit is named rlqs, so it never meets a window key
 *   spend list    <prefix>v<N>:top:[{<tag>}:]<counter id>:<window>:<i>
 *                                                  a charge_mode rule's counters nearest their own limit in window
 *                                                  i (a bucket's: no :<i>), a sorted set of counter tags by share,
 *                                                  written with each charge (lua/spend-top.lua). On a Cluster the
 *                                                  tag puts it on the master of the counters it lists: one list
 *                                                  per run of slots a master serves (cluster-routes.ts)
 *   usage ledger  <prefix>v<N>:usage[:{<tag>}]     a Redis Stream of the usage events of rules with `usage`
 *                                                  (lua/usage.lua), one per master run of slots on a Cluster
 *                                                  (as the spend lists), or per slot for a request sent slot
 *                                                  by slot; `tollgate usage export` finds them by this name
 *   tiers         <prefix>tiers                    the tier assignments (a hash by fingerprint)
 *   events        <prefix>events                   the pub/sub channel of tier changes and counter resets
 *   shares        <prefix>rlqs                     the pub/sub channel of RLQS share changes (a demand key)
 *                                                  (neither channel holds a ':', which every store key does)
 *
 * Domain and rule path are URL-encoded, so config text never holds ':', '{' or '}' of its own; request values
 * and request keys appear only as fingerprints (hex), so a key never holds raw request text and its length is
 * bounded. The {…} is a Redis Cluster hash tag: all windows of a descriptor, and all counters of one client,
 * share a slot. Keys are ASCII by construction (the memory store relies on it).
 *
 * The rule path joins keys and values with '.' and '_', which config keys and values may contain: two rules
 * that would share a path (key `a.b`, and key `a` with child `b`) are refused when the config is validated. */

/** The rule's part of every counter key. */
export function counterId(domain: string, rulePath: string): string {
  return `${encodeURIComponent(domain)}:${encodeURIComponent(rulePath)}`;
}

/** The counter of a descriptor: `variable` marks, per entry, the values that are part of its identity. */
export function counterKey(id: string, variable: readonly boolean[], entries: readonly { value: string }[]): string {
  let fingerprints = '';
  for (let i = 0; i < variable.length; i++) {
    if (variable[i]) fingerprints += (fingerprints === '' ? '' : '.') + cachedFingerprint(entries[i]!.value);
  }
  return counterKeyOf(id, fingerprints);
}

/** The counter key from fingerprints already computed, joined by '.' (a client known only by fingerprint). */
export function counterKeyOf(id: string, fingerprints: string): string {
  return fingerprints === '' ? `{${id}}` : `${id}:{${fingerprints}}`;
}

/** The counter of a descriptor that carries Envoy's limit but matches no rule: every value is part of its
 * identity, and so are its keys. The keys come from the request, so only their fingerprint is used. */
export function overrideCounterKey(domain: string, entries: readonly { key: string; value: string }[]): string {
  const id = `${counterId(domain, '~override')}:${cachedFingerprint(JSON.stringify(entries.map((e) => e.key)))}`;
  return counterKey(
    id,
    entries.map(() => true),
    entries,
  );
}

/** One window of a counter. */
export function windowKey(counterKey: string, unit: string): string {
  return `${counterKey}:${unit}`;
}

/** The name a window goes by in its key: the unit alone for the windows every release has had, so their
 * counters carry over. */
export function windowName(unit: string, multiplier: number, calendar: boolean): string {
  return `${unit}${multiplier > 1 ? `.x${multiplier}` : ''}${calendar ? '.cal' : ''}`;
}

/** Where a charge-mode descriptor's reservations are kept (the hash; the sorted sets of expiries are
 * `<this>.exp`, open ones, and `<this>.done`, ended ones: reservationTable). No unit is named rsv, so it never
 * meets a window key. */
export function reservationKey(counterKey: string): string {
  return `${counterKey}:rsv`;
}

/** The three keys of a reservation table, as check-and-incr.lua takes them: the hash (reservationKey), the open
 * ones by expiry and the ended ones by when they are forgotten. Same hash tag, so the same Cluster slot. */
export function reservationTable(reservationKey: string): [hash: string, open: string, done: string] {
  return [reservationKey, `${reservationKey}.exp`, `${reservationKey}.done`];
}

/** Where an in_flight rule's slots are kept: a sorted set of holders by lease end, and slotHolders(this), a hash
 * of what each holds (slots.lua). No unit is named slots, so it never meets a window key. */
export function slotsKey(counterKey: string): string {
  return `${counterKey}:slots`;
}

/** The hash of what each holder of a slots key holds. Same hash tag, so the same Cluster slot. */
export function slotHolders(slotsKey: string): string {
  return `${slotsKey}:h`;
}

/** An RLQS bucket's demand table: every Envoy instance's demand for the counter, shared by replicas. */
export function demandKey(counterKey: string): string {
  return `${counterKey}:rlqs`;
}

/** What ends a bucket's key. */
export const BUCKET_SUFFIX = '.bucket';

/** One token bucket of a counter (a stored TAT is not a window's count). */
export function bucketKey(counterKey: string, unit: string): string {
  return `${counterKey}:${unit}${BUCKET_SUFFIX}`;
}

/** The version of the counter layout: key names and what their hashes hold (check-and-incr.lua's header).
 * Raise it with any change to either. */
export const LAYOUT_VERSION = 2;
const LAYOUT = `v${LAYOUT_VERSION}:`;

/** A window's key in a shared store: the namespace (--redis-key-prefix) first, so several services can share
 * one Redis, then the layout version. */
export function storeKey(prefix: string, windowKey: string): string {
  return prefix + LAYOUT + windowKey;
}

/** Layout 2's counter of one window: its store key and the window's index since the epoch. */
export function windowCounterName(storeKey: string, windowMs: number, atMs: number): string {
  return `${storeKey}:${Math.floor(atMs / windowMs)}`;
}

/** The Redis hash of tier assignments, and the channel replicas tell each other of changes on. */
export function tierHashKey(prefix: string): string {
  return `${prefix}tiers`;
}

export function eventsChannel(prefix: string): string {
  return `${prefix}events`;
}

/** The pub/sub channel replicas tell each other on that an RLQS bucket's shares moved (the message: its share
 * key, fingerprints only). */
export function sharesChannel(prefix: string): string {
  return `${prefix}rlqs`;
}

/** The list of slots an Envoy (a peer, by fingerprint) holds and its replicas renew (store.ts SlotLeases): a
 * hash of its own, in the Cluster slot its fingerprint picks. */
export function peerSlotsKey(prefix: string, peer: string): string {
  return `${prefix}${LAYOUT}peer:{${peer}}`;
}

/** The counters of an in_flight rule that took slots, for its census (store.ts SlotCensus): a hash of its
 * own, in the Cluster slot the rule's fingerprint picks. */
export function censusKey(prefix: string, rule: string): string {
  return `${prefix}${LAYOUT}census:{${rule}}`;
}

/** Where a charge_mode rule's window lists its counters nearest their limit (store/spend-top.ts), but for the
 * window's index (`:<i>`, added by whoever knows the time: check-and-incr.lua, the reader). `tag`: the Cluster
 * hash tag that puts the list on the master of the counters it lists. */
export function spendTopKey(prefix: string, counterId: string, windowName: string, tag = ''): string {
  return `${prefix}${LAYOUT}top:${tag === '' ? '' : `{${tag}}:`}${counterId}:${windowName}`;
}

/** A usage ledger's stream (store/usage-ledger.ts); `tag`: the Cluster hash tag that puts it on a master. */
export function usageStreamKey(prefix: string, tag = ''): string {
  return `${prefix}${LAYOUT}usage${tag === '' ? '' : `:{${tag}}`}`;
}

/** The rule's counter id and the window's name of a window key (`<counter key>:<window>`). */
export function windowKeyParts(windowKey: string): { counterId: string; windowName: string } {
  const end = windowKey.lastIndexOf(':');
  const counter = windowKey.slice(0, end);
  const counterId = counter.startsWith('{') ? counter.slice(1, -1) : counter.slice(0, counter.indexOf(':{'));
  return { counterId, windowName: windowKey.slice(end + 1) };
}

/** The Redis Cluster hash tag of a counter or window key: the text inside its first {…}. */
export function hashTag(key: string): string {
  const open = key.indexOf('{');
  return key.slice(open + 1, key.indexOf('}', open + 1));
}
