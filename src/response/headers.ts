import type { HeaderSpec } from '../config/spec.js';
import type { Decision, WindowState } from '../limiter/limiter.js';
import { ALGORITHMS } from '../limits/kinds/index.js';
import { reportedWindow } from './pick.js';
import type { WireHeader } from './wire.js';

/** Whole seconds a client should wait; at least 1, since 0 invites an immediate retry that fails. */
export function retryAfterSeconds(ms: number): number {
  return Math.max(1, Math.ceil(ms / 1000));
}

/** The headers Envoy copies onto the response (the upstream's when OK, the 429 when over limit). */
export function rateLimitHeaders(d: Decision, spec: HeaderSpec): WireHeader[] {
  const picked = spec.style === 'none' ? undefined : reportedWindow(d.descriptors, spec.window);
  // Arrays made whole (a push onto [] allocates room for 17): the usual answer is these three headers.
  let headers: WireHeader[] = [];
  if (picked) {
    const { window: w, owner } = picked;
    if (spec.style === 'draft') {
      headers = [
        { key: 'RateLimit-Policy', value: owner.windows.map(policyItem).join(', ') },
        { key: 'RateLimit', value: serviceLimitItem(w, d.nowMs) },
      ];
    } else {
      // A bucket holds up to its burst, so that is its limit here (remaining counts tokens, up to the burst).
      headers = [
        { key: spec.limit, value: String(ALGORITHMS[w.limit.kind]!.capacity(w.limit)) },
        { key: spec.remaining, value: String(w.remaining) },
        { key: spec.reset, value: String(Math.ceil(w.resetAtMs / 1000)) },
      ];
    }
  }
  if (d.overLimit) {
    headers.push({ key: 'Retry-After', value: String(retryAfterSeconds(d.retryAfterMs)) });
    headers.push({ key: 'content-type', value: 'application/problem+json' });
  }
  return headers;
}

/** A policy of draft-ietf-httpapi-ratelimit-headers (-11): q requests per w seconds. A token bucket's q/w is
 * its refill rate, and its burst goes in a vendor-prefixed parameter, as the draft asks of parameters of
 * its own: `"read";q=10;w=1;tollgate-burst=20`. */
function policyItem(x: WindowState): string {
  const item = `${sfString(x.limit.name)};q=${x.limit.requestsPerUnit};w=${x.limit.windowSeconds}`;
  const { burst } = ALGORITHMS[x.limit.kind]!.shown(x.limit);
  return burst === undefined ? item : `${item};tollgate-burst=${burst}`;
}

/** The service limit: r left, and t, the seconds within which no more than r can be used. For a window,
 * until it resets. For a bucket, until its next token (it refills continuously, so "until full" would
 * promise too little); a full bucket gets no next token, so it has no t. */
function serviceLimitItem(w: WindowState, nowMs: number): string {
  const head = `${sfString(w.limit.name)};r=${w.remaining}`;
  if (!ALGORITHMS[w.limit.kind]!.refills) return `${head};t=${Math.max(0, Math.ceil((w.resetAtMs - nowMs) / 1000))}`;
  const missing = w.limit.burst - w.remaining;
  if (missing <= 0 || w.limit.requestsPerUnit === 0) return head;
  // Full at resetAtMs; each missing token before the next takes one emission interval.
  const intervalMs = (w.limit.windowSeconds * 1000) / w.limit.requestsPerUnit;
  return `${head};t=${Math.max(0, Math.ceil((w.resetAtMs - nowMs - (missing - 1) * intervalMs) / 1000))}`;
}

/** A Structured Field String (RFC 9651): printable ASCII, with `"` and `\` escaped. Limit names come from
 * the config; anything else is left out rather than breaking the client's parser. */
function sfString(text: string): string {
  return `"${text.replace(/[^\x20-\x7e]/g, '').replace(/["\\]/g, (c) => `\\${c}`)}"`;
}
