import { isMap, isScalar, type Node } from 'yaml';
import { SLOT_KIND } from '../limits/kinds/index.js';
import type { DescriptorSpec } from './spec.js';
import type { Reader } from './yaml-reader.js';

/** A descriptor's `in_flight: {limit, lease, request_key}`, and the `refunds` a rule may turn off: read apart
 * from the rest of a descriptor (validate.ts), as what only slots and refunds are about. */

export const IN_FLIGHT_KEYS = ['limit', 'lease', 'max_hold', 'request_key'];
/** A slot nobody gives back returns after 5 minutes unless `lease` says; at most a day. */
export const DEFAULT_LEASE_MS = 300_000;
/** Most slots of one in_flight rule's counter: each is a record in the store until given back. */
export const MAX_IN_FLIGHT = 100_000;
/** Keys an in_flight descriptor may not have: it counts requests at once, not per window, and never charges. */
const NOT_WITH_IN_FLIGHT = ['rate_limit', 'rate_limits', 'algorithm', 'quota_mode', 'charge_mode'];

/** `in_flight: {limit, lease, request_key}`: slots instead of windows (docs/in-flight.md). `ruleKeys`: the keys
 * of the descriptor and those above it, which its request_key may not be: the id would then be a value every
 * request of the counter shares, or the entry that picks the rule, and no request would hold a slot of its own. */
export function readInFlight(r: Reader, f: Map<string, Node>, path: string, ruleKeys: readonly string[], tiers: readonly string[]): DescriptorSpec['inFlight'] {
  const node = f.get(SLOT_KIND.kind);
  if (node === undefined) return undefined;
  const at = `${path}.${SLOT_KIND.kind}`;
  for (const k of NOT_WITH_IN_FLIGHT) if (f.has(k)) r.fail(f.get(k), `${path}.${k}`, `an in_flight descriptor counts requests at once: it has no ${k}`);
  const g = r.fields(node, at, IN_FLIGHT_KEYS);
  if (!g) return undefined;
  const n = readSlots(r, g.get('limit'), node, `${at}.limit`);
  if (n === undefined) return undefined;
  let leaseMs = DEFAULT_LEASE_MS;
  if (g.has('lease')) {
    const ms = durationMs(r.string(g.get('lease'), `${at}.lease`));
    if (ms === undefined || ms < 1000 || ms > 86_400_000) {
      r.fail(g.get('lease'), `${at}.lease`, 'must be a duration from 1s to 24h, in whole seconds, minutes or hours (30s, 5m, 1h)');
    } else leaseMs = ms;
  }
  const requestKey = r.string(g.get('request_key'), `${at}.request_key`, { nonEmpty: true });
  if (requestKey !== undefined && ruleKeys.includes(requestKey)) {
    r.fail(
      g.get('request_key'),
      `${at}.request_key`,
      `"${requestKey}" is a key of this rule's own descriptors: the request id must come from an entry of its own, after them`,
    );
  }
  const maxHoldMs = readMaxHold(r, g.get('max_hold'), `${at}.max_hold`, leaseMs, requestKey);
  const byTier = readInFlightTiers(r, f.get('tier_limits'), `${path}.tier_limits`, tiers);
  return { limit: n, leaseMs, requestKey, ...(maxHoldMs && { maxHoldMs }), ...(byTier && { tiers: byTier }) };
}

/** The shortest lease a renewed slot may have: renewals come every third of it (limiter/slot-keeper.ts), so a
 * slot outlives one missed renewal, a Redis stall or an Envoy's reconnect to another replica. */
export const MIN_RENEWED_LEASE_MS = 3000;

/** `max_hold`: how long a slot may be renewed, past its lease, while its Envoy stays connected. A duration
 * longer than the lease, at most a day; renewal is by the request's id, so the rule needs request_key. */
function readMaxHold(r: Reader, node: Node | undefined, at: string, leaseMs: number, requestKey: string | undefined): number | undefined {
  if (node === undefined) return undefined;
  const ms = durationMs(r.string(node, at));
  if (ms === undefined || ms <= leaseMs || ms > 86_400_000) {
    r.fail(node, at, 'must be a duration longer than the lease, at most 24h (15m, 1h): how long a slot may be renewed');
    return undefined;
  }
  if (leaseMs < MIN_RENEWED_LEASE_MS) {
    r.fail(node, at, `needs a lease of ${MIN_RENEWED_LEASE_MS / 1000}s or more: a renewed slot must outlive a missed renewal`);
    return undefined;
  }
  if (requestKey === undefined) {
    r.fail(node, at, "renews a request's slot by its id: the rule needs request_key");
    return undefined;
  }
  return ms;
}

/** A number of slots: a whole number from 1 to MAX_IN_FLIGHT. */
function readSlots(r: Reader, limit: Node | undefined, parent: Node, at: string): number | undefined {
  const n = limit !== undefined && isScalar(limit) ? limit.value : undefined;
  if (typeof n === 'number' && Number.isInteger(n) && n >= 1 && n <= MAX_IN_FLIGHT) return n;
  r.fail(limit ?? parent, at, `is required: a whole number of requests at once, from 1 to ${MAX_IN_FLIGHT}`);
  return undefined;
}

/** An in_flight rule's `tier_limits: {TIER: {limit: N}}`: a client in the tier holds N slots at once (its lease
 * and request key are the rule's). */
function readInFlightTiers(r: Reader, node: Node | undefined, path: string, tiers: readonly string[]): Map<string, number> | undefined {
  if (node === undefined) return undefined;
  if (!isMap(node)) {
    r.fail(node, path, 'must map tier names to {limit: N}, the slots of a client in that tier');
    return undefined;
  }
  const out = new Map<string, number>();
  for (const pair of node.items) {
    const tier = r.string(pair.key as Node, path, { nonEmpty: true });
    if (tier === undefined) continue;
    if (!tiers.includes(tier)) {
      r.fail(pair.key as Node, `${path}.${tier}`, `unknown tier "${tier}" (declare it under tiers: at the top of the file)`);
      continue;
    }
    if (!isMap(pair.value)) {
      r.fail(pair.value as Node, `${path}.${tier}`, "an in_flight rule's tier is {limit: N}, the slots of a client in it, not a list of windows");
      continue;
    }
    const g = r.fields(pair.value, `${path}.${tier}`, ['limit']);
    const n = g && readSlots(r, g.get('limit'), pair.value, `${path}.${tier}.limit`);
    if (n) out.set(tier, n);
  }
  return out;
}

/** `refunds: false`: the rule ignores Envoy's is_negative_hits (each one counted). An in_flight rule's slots
 * come back only by give-backs, so it cannot. */
export function readRefunds(r: Reader, f: Map<string, Node>, path: string, inFlight: boolean): boolean | undefined {
  if (!f.has('refunds')) return undefined;
  const refunds = r.boolean(f.get('refunds'), `${path}.refunds`);
  if (refunds === false && inFlight) {
    r.fail(f.get('refunds'), `${path}.refunds`, "an in_flight rule's slots come back by give-backs (is_negative_hits): it takes them");
  }
  return refunds;
}

/** "30s", "10m", "2h" in milliseconds. */
export function durationMs(text: string | undefined): number | undefined {
  const m = text === undefined ? null : /^(\d{1,6})(s|m|h)$/.exec(text);
  return m ? Number(m[1]) * { s: 1000, m: 60_000, h: 3_600_000 }[m[2] as 's' | 'm' | 'h'] : undefined;
}
