import type { CompiledDomain } from '../config/compiled.js';
import { DEFAULT_HEADERS, type HeaderSpec } from '../config/spec.js';
import { MAX_UINT32 } from '../config/units.js';
import type { Decision } from '../limiter/limiter.js';
import { rateLimitHeaders } from './headers.js';
import { Code, type WireHeader, type WireStatus } from './wire.js';

/** Which headers (and 429 body) an answer carries: decided here, for every answer, from the settings and the
 * domain's config. envoyproxy/ratelimit adds none unless LIMIT_RESPONSE_HEADERS_ENABLED, and Envoy Gateway
 * turns on Envoy's own x-ratelimit-* headers (its internal/xds/translator/ratelimit.go), so a config from xDS
 * gets none of Tollgate's: Envoy's set is the one a client sees. */

export interface ResponseSettings {
  /** RESPONSE_HEADERS: Tollgate's own headers, Retry-After and problem body. auto: as each file config says
   * (`response_headers:`, default x-ratelimit), none for configs from xDS; on: for every domain; off: never. */
  tollgate: 'auto' | 'on' | 'off';
  /** LIMIT_RESPONSE_HEADERS_ENABLED, undefined when not set. */
  limitHeaders: boolean | undefined;
  /** LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER. */
  names: { limit: string; remaining: string; reset: string };
  /** LIMIT_REQUEST_HEADERS_ENABLED's names: the same three headers on the request Envoy forwards upstream
   * (request_headers_to_add), on every answer whatever its style; undefined when off. */
  requestHeaders?: { limit: string; remaining: string; reset: string };
  /** Where the configs come from: xDS configs are envoyproxy/ratelimit's format, and get its default. With a
   * config directory beside xDS servers, 'file', and each domain from xDS says so (CompiledDomain.fromXds). */
  source: 'file' | 'xds';
}

/** Tollgate's defaults, with no envoyproxy/ratelimit setting in force. */
export const DEFAULT_RESPONSES: ResponseSettings = {
  tollgate: 'auto',
  limitHeaders: undefined,
  names: { limit: 'RateLimit-Limit', remaining: 'RateLimit-Remaining', reset: 'RateLimit-Reset' },
  source: 'file',
};

export type AnswerStyle =
  /** Tollgate's own: the spec's headers and, on a 429, Retry-After and an application/problem+json body. */
  | { kind: 'tollgate'; spec: HeaderSpec }
  /** envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED: three headers, no body. */
  | { kind: 'ratelimit'; names: ResponseSettings['names'] }
  | { kind: 'none' };

const NONE: AnswerStyle = { kind: 'none' };

/** The first that applies wins (docs/configuration.md, "Which headers"): RESPONSE_HEADERS=on; a file config's
 * own `response_headers:`; LIMIT_RESPONSE_HEADERS_ENABLED=true; then none when RESPONSE_HEADERS=off,
 * LIMIT_RESPONSE_HEADERS_ENABLED=false or the config came from xDS; else Tollgate's default. */
export function answerStyle(domain: CompiledDomain | undefined, s: ResponseSettings): AnswerStyle {
  if (s.tollgate === 'on') return { kind: 'tollgate', spec: domain?.headers ?? DEFAULT_HEADERS };
  if (s.tollgate === 'auto' && domain?.headers) return { kind: 'tollgate', spec: domain.headers };
  if (s.limitHeaders) return { kind: 'ratelimit', names: s.names };
  if (s.tollgate === 'off' || s.limitHeaders === false || s.source === 'xds' || domain?.fromXds) return NONE;
  return { kind: 'tollgate', spec: DEFAULT_HEADERS };
}

export function answerHeaders(style: AnswerStyle, d: Decision, statuses: readonly WireStatus[]): WireHeader[] {
  if (style.kind === 'tollgate') return rateLimitHeaders(d, style.spec);
  if (style.kind === 'ratelimit') return ratelimitHeaders(d, statuses, style.names);
  return [];
}

/** envoyproxy/ratelimit's headers (src/service/ratelimit.go, shouldRateLimitWorker): of the statuses that name
 * a limit, the one with the fewest remaining (the first on a tie); a descriptor over its limit and not in
 * quota mode wins outright (the last such). Its limit, its remaining, and the seconds until its window
 * resets: utils.CalculateReset's `unit - now % unit`, which for an epoch-aligned window is the status's
 * duration_until_reset rounded up (and for Tollgate's other windows, their own reset). The request's headers
 * (LIMIT_REQUEST_HEADERS_ENABLED, its PR #1168, head 619b2d32) take the same status, OK or OVER_LIMIT. */
export function ratelimitHeaders(d: Decision, statuses: readonly WireStatus[], names: ResponseSettings['names']): WireHeader[] {
  let chosen: WireStatus | undefined;
  let least = MAX_UINT32;
  statuses.forEach((s, i) => {
    if (s.current_limit && s.limit_remaining < least) {
      chosen = s;
      least = s.limit_remaining;
    }
    const o = d.descriptors[i]!;
    if (s.code === Code.OVER_LIMIT && !o.unlimited && !o.quota) {
      chosen = s;
      least = 0;
    }
  });
  if (!chosen?.current_limit) return [];
  const reset = chosen.duration_until_reset;
  const seconds = reset ? reset.seconds + (reset.nanos > 0 ? 1 : 0) : 0;
  return [
    { key: names.limit, value: String(chosen.current_limit.requests_per_unit) },
    { key: names.remaining, value: String(chosen.limit_remaining) },
    { key: names.reset, value: String(seconds) },
  ];
}
