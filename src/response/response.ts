import { MAX_UINT32 } from '../config/units.js';
import type { Decision, DescriptorOutcome } from '../limiter/limiter.js';
import { ALGORITHMS } from '../limits/kinds/index.js';
import { answerHeaders, answerStyle, DEFAULT_RESPONSES, type ResponseSettings, ratelimitHeaders } from './header-policy.js';
import { retryAfterSeconds } from './headers.js';
import { bindingWindow } from './pick.js';
import { Code, durationFromMs, type WireResponse, type WireStatus } from './wire.js';

/** Turns a decision into the RLS response: statuses in descriptor order, then the headers and, on a 429, the
 * problem body that the answer's style (header-policy.ts) calls for. */
export function toWireResponse(d: Decision, settings: ResponseSettings = DEFAULT_RESPONSES): WireResponse {
  const statuses = d.descriptors.map((o) => toStatus(o, d.nowMs));
  const style = answerStyle(d.domain, settings);
  const response: WireResponse = {
    overall_code: d.overLimit ? Code.OVER_LIMIT : Code.OK,
    statuses,
    response_headers_to_add: answerHeaders(style, d, statuses),
    request_headers_to_add: settings.requestHeaders ? ratelimitHeaders(d, statuses, settings.requestHeaders) : [],
  };
  if (d.overLimit && style.kind === 'tollgate') response.raw_body = Buffer.from(JSON.stringify(problem(d)));
  return response;
}

/** envoyproxy/ratelimit's answers (src/service/ratelimit.go, src/limiter/base_limiter.go): an unlimited
 * descriptor is OK with 4294967295 remaining; one whose rule is in shadow_mode is OK even when over (its
 * remaining still says 0); a quota-mode descriptor over its limit says OVER_LIMIT though the request passes.
 * Tollgate's own view of a shadow limit that would have blocked stays in explain, metrics and the debug log. */
function toStatus(o: DescriptorOutcome, nowMs: number): WireStatus {
  const w = bindingWindow(o.windows);
  if (!w) return { code: Code.OK, limit_remaining: o.unlimited ? MAX_UINT32 : 0 };
  const code = o.over && !o.shadowStatus ? Code.OVER_LIMIT : Code.OK;
  return {
    code,
    // A budget may pass 2^32 (MAX_LIMIT): the wire's uint32 fields clamp, the headers carry the exact numbers.
    // Only a name the config gave, as envoyproxy/ratelimit answers: Envoy appends it to its x-ratelimit-limit
    // header, and a generated one (domain and rule path) is no business of the client's.
    current_limit: {
      name: w.limit.named ? w.limit.name : '',
      requests_per_unit: Math.min(w.limit.requestsPerUnit, MAX_UINT32),
      unit: w.limit.unitCode,
    },
    limit_remaining: Math.min(w.remaining, MAX_UINT32),
    duration_until_reset: untilReset(w, code, nowMs),
  };
}

/** An OVER_LIMIT status says when this request would fit, in the whole seconds Tollgate's Retry-After says: Envoy
 * 1.40's enable_retry_after_header writes Retry-After from the largest of them, at least 1 s (envoyproxy/envoy
 * PR #46289), and a sliding window's end is not when a request fits. Otherwise a window ends when it lets
 * requests in again; a bucket is full long after the next request fits, so a blocking one (a shadow status)
 * says when this request would fit, an open one when it is full. */
function untilReset(w: NonNullable<ReturnType<typeof bindingWindow>>, code: number, nowMs: number): WireStatus['duration_until_reset'] {
  if (code === Code.OVER_LIMIT) return { seconds: retryAfterSeconds(w.retryAfterMs), nanos: 0 };
  return durationFromMs(w.over && ALGORITHMS[w.limit.kind]!.refills ? w.retryAfterMs : w.resetAtMs - nowMs);
}

/** The problem type draft-ietf-httpapi-ratelimit-headers registers for an exceeded quota. */
export const QUOTA_EXCEEDED = 'https://iana.org/assignments/http-problem-types#quota-exceeded';

/** RFC 9457 problem details, of the draft's quota-exceeded type: `violated-policies` names every limit that
 * blocks the request; `limit` (the one with the longest wait) and `retry_after` stay for older clients. Never
 * the client's token. */
function problem(d: Decision): Record<string, unknown> {
  // Normal descriptors over their limit block; quota-mode ones only when no normal one does (then all of
  // them are over, or the request would have passed).
  const normal = d.descriptors.filter((o) => o.over && !o.shadow && !o.quota);
  const blockingDescriptors = normal.length > 0 ? normal : d.descriptors.filter((o) => o.over && !o.shadow);
  if (blockingDescriptors.length === 0) return { type: QUOTA_EXCEEDED, title: 'Quota Exceeded', status: 429, retry_after: retryAfterSeconds(d.retryAfterMs) };
  const blocking = blockingDescriptors.map((o) => bindingWindow(o.windows)!);
  const worst = blocking.reduce((a, b) => (b.retryAfterMs > a.retryAfterMs ? b : a));
  const retryAfter = retryAfterSeconds(d.retryAfterMs);
  return {
    type: QUOTA_EXCEEDED,
    title: 'Quota Exceeded',
    status: 429,
    detail:
      `Rate limit exceeded: ${worst.limit.requestsPerUnit} ${d.domain?.headers?.units ?? 'requests'} ` +
      `${ALGORITHMS[worst.limit.kind]!.per(worst.limit)} (${worst.limit.name}). ` +
      `Retry after ${retryAfter} s.`,
    'violated-policies': blockingDescriptors.flatMap((o) => o.windows.filter((w) => w.over).map((w) => w.limit.name)),
    limit: worst.limit.name,
    retry_after: retryAfter,
  };
}
