/** A model of what Envoy's HTTP rate-limit filter puts on the response a client gets, from the RLS answer:
 * envoyproxy/envoy's source/extensions/filters/http/ratelimit/ratelimit_headers.cc (XRateLimitHeaderUtils::create,
 * the x-ratelimit-* headers of enable_x_ratelimit_headers: DRAFT_VERSION_03, which Envoy Gateway turns on for
 * every listener in its internal/xds/translator/ratelimit.go) and ratelimit.cc (Filter::complete and
 * populateResponseHeaders: the service's response_headers_to_add, then Envoy's own, each *appended* with
 * HeaderMapImpl::copyFrom, so the same name twice reaches the client twice; raw_body as the 429's body). */

/** A DescriptorStatus as either gRPC client hands it over: enums by number or by name. */
export interface StatusLike {
  code: number | string;
  current_limit?: { name: string; requests_per_unit: number; unit: number | string } | null;
  limit_remaining: number;
  duration_until_reset?: { seconds: number; nanos: number } | null;
}

export interface AnswerLike {
  overall_code: number | string;
  statuses: StatusLike[];
  response_headers_to_add: { key: string; value: string }[];
  raw_body?: Buffer | Uint8Array | null;
}

/** convertRateLimitUnit: window seconds by RateLimitResponse.RateLimit.Unit; UNKNOWN is 0 (no policy item). */
const WINDOW: Record<string, number> = { SECOND: 1, MINUTE: 60, HOUR: 3600, DAY: 86_400, WEEK: 604_800, MONTH: 2_592_000, YEAR: 31_536_000 };
const UNIT_NAMES = ['UNKNOWN', 'SECOND', 'MINUTE', 'HOUR', 'DAY', 'MONTH', 'YEAR', 'WEEK'];

const unitName = (u: number | string): string => (typeof u === 'number' ? (UNIT_NAMES[u] ?? 'UNKNOWN') : u);

/** XRateLimitHeaderUtils::create: of the statuses with a current_limit, the one with the fewest remaining (the
 * first on a tie) gives limit, remaining and reset (duration_until_reset's whole seconds); the limit header
 * carries every status's quota policy, `, <limit>;w=<window>` and `;name="<name>"` when the name is not empty. */
export function envoyXRateLimitHeaders(statuses: readonly StatusLike[]): [string, string][] {
  let min: StatusLike | undefined;
  let policy = '';
  for (const s of statuses) {
    if (!s.current_limit) continue;
    if (!min || s.limit_remaining < min.limit_remaining) min = s;
    const window = WINDOW[unitName(s.current_limit.unit)] ?? 0;
    if (window) {
      policy += `, ${s.current_limit.requests_per_unit};w=${window}`;
      if (s.current_limit.name !== '') policy += `;name="${s.current_limit.name}"`;
    }
  }
  if (!min) return [];
  return [
    ['x-ratelimit-limit', `${min.current_limit!.requests_per_unit}${policy}`],
    ['x-ratelimit-remaining', String(min.limit_remaining)],
    ['x-ratelimit-reset', String(min.duration_until_reset?.seconds ?? 0)],
  ];
}

export interface ClientView {
  status: number;
  /** Every header the rate-limit filter added, in order, names lower-cased (HTTP/2). */
  headers: [string, string][];
  body: string;
}

/** What the client gets from the filter with Envoy Gateway's defaults (x-ratelimit headers on, x-envoy-ratelimited
 * off): on OVER_LIMIT a local 429 with raw_body, else the upstream's response; either way the service's headers
 * then Envoy's, appended. Only the filter's own headers are modelled, not the upstream's. */
export function clientView(answer: AnswerLike, xRateLimitHeaders = true): ClientView {
  const over = answer.overall_code === 2 || answer.overall_code === 'OVER_LIMIT';
  const headers: [string, string][] = answer.response_headers_to_add.map((h) => [h.key.toLowerCase(), h.value]);
  if (xRateLimitHeaders) headers.push(...envoyXRateLimitHeaders(answer.statuses));
  return { status: over ? 429 : 200, headers, body: over ? Buffer.from(answer.raw_body ?? []).toString('utf8') : '' };
}

/** How often each header name reaches the client. */
export function nameCounts(view: ClientView): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k] of view.headers) out[k] = (out[k] ?? 0) + 1;
  return out;
}
