import type { IncomingMessage } from 'node:http';
import { hashTag } from '../counters/keys.js';
import { InvalidRequestError } from '../errors.js';
import { CENSUS_TOP, type RuleCensus } from '../limiter/slot-census.js';

/** Counters listed per rule unless `top` says. */
const DEFAULT_TOP = 10;

/** `GET /admin/in-flight?top=N`: per in_flight rule, the slots held and the N counters nearest their limit, as
 * the last census read them in the store (limiter/slot-census.ts). Bounded: N is 1 to CENSUS_TOP. A counter is
 * shown by its fingerprints (the values that make it, hashed), never by a request's text. */
export function inFlightView(deps: { inFlight?: () => RuleCensus[] }, url: IncomingMessage['url']): Record<string, unknown> {
  const top = topOf(new URL(url ?? '', 'http://admin').searchParams.get('top'));
  const rules = (deps.inFlight?.() ?? []).map((c) => ({
    domain: c.domain,
    rule: c.rule.id,
    limit: c.rule.inFlight!.limit,
    held: c.census.held,
    counters: c.census.counters,
    partial: c.census.partial,
    countedAt: new Date(c.atMs).toISOString(),
    nearest: c.census.top.slice(0, top).map((t) => ({ counter: hashTag(t.key), held: t.held, limit: t.limit, share: t.held / t.limit })),
  }));
  return { rules };
}

function topOf(text: string | null): number {
  if (text === null) return DEFAULT_TOP;
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1 || n > CENSUS_TOP) throw new InvalidRequestError(`top must be a whole number from 1 to ${CENSUS_TOP}`);
  return n;
}
