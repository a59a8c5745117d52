import { DEFAULT_HEADERS } from '../config/spec.js';
import type { Decision, DescriptorOutcome } from '../limiter/limiter.js';
import { rateLimitHeaders, retryAfterSeconds } from './headers.js';
import { bindingWindow } from './pick.js';
import { Code, durationFromMs, type WireResponse, type WireStatus } from './wire.js';

/** Turns a decision into the RLS response: statuses in descriptor order, headers, and a problem body. */
export function toWireResponse(d: Decision): WireResponse {
  const response: WireResponse = {
    overall_code: d.overLimit ? Code.OVER_LIMIT : Code.OK,
    statuses: d.descriptors.map((o) => toStatus(o, d.nowMs)),
    response_headers_to_add: rateLimitHeaders(d, d.domain?.headers ?? DEFAULT_HEADERS),
    request_headers_to_add: [],
  };
  if (d.overLimit) response.raw_body = Buffer.from(JSON.stringify(problem(d)));
  return response;
}

function toStatus(o: DescriptorOutcome, nowMs: number): WireStatus {
  const w = bindingWindow(o.windows);
  if (!w) return { code: Code.OK, limit_remaining: 0 };
  return {
    code: o.over ? Code.OVER_LIMIT : Code.OK,
    current_limit: { name: w.limit.name, requests_per_unit: w.limit.requestsPerUnit, unit: w.limit.unitCode },
    limit_remaining: w.remaining,
    duration_until_reset: durationFromMs(w.resetAtMs - nowMs),
  };
}

/** RFC 9457 problem details. Names the limit that was hit, never the client's token. */
function problem(d: Decision): Record<string, unknown> {
  const blocking = d.descriptors.filter((o) => o.over && !o.shadow).map((o) => bindingWindow(o.windows)!);
  const worst = blocking.reduce((a, b) => (b.retryAfterMs > a.retryAfterMs ? b : a));
  const retryAfter = retryAfterSeconds(d.retryAfterMs);
  return {
    type: 'about:blank',
    title: 'Too Many Requests',
    status: 429,
    detail: `Rate limit exceeded: ${worst.limit.requestsPerUnit} requests per ${worst.limit.unit} (${worst.limit.name}). Retry after ${retryAfter} s.`,
    limit: worst.limit.name,
    retry_after: retryAfter,
  };
}
