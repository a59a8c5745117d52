import type { HeaderSpec } from '../config/spec.js';
import type { Decision } from '../limiter/limiter.js';
import { reportedWindow } from './pick.js';
import type { WireHeader } from './wire.js';

/** Whole seconds a client should wait; at least 1, since 0 invites an immediate retry that fails. */
export function retryAfterSeconds(ms: number): number {
  return Math.max(1, Math.ceil(ms / 1000));
}

/** The headers Envoy copies onto the response (the upstream's when OK, the 429 when over limit). */
export function rateLimitHeaders(d: Decision, spec: HeaderSpec): WireHeader[] {
  const headers: WireHeader[] = [];
  const picked = spec.style === 'none' ? undefined : reportedWindow(d.descriptors, spec.window);
  if (picked) {
    const { window: w, owner } = picked;
    if (spec.style === 'draft') {
      const policies = owner.windows.map((x) => `"${x.limit.name}";q=${x.limit.requestsPerUnit};w=${x.limit.windowSeconds}`);
      headers.push({ key: 'RateLimit-Policy', value: policies.join(', ') });
      const t = Math.max(0, Math.ceil((w.resetAtMs - d.nowMs) / 1000));
      headers.push({ key: 'RateLimit', value: `"${w.limit.name}";r=${w.remaining};t=${t}` });
    } else {
      headers.push(
        { key: spec.limit, value: String(w.limit.requestsPerUnit) },
        { key: spec.remaining, value: String(w.remaining) },
        { key: spec.reset, value: String(Math.ceil(w.resetAtMs / 1000)) },
      );
    }
  }
  if (d.overLimit) {
    headers.push({ key: 'Retry-After', value: String(retryAfterSeconds(d.retryAfterMs)) });
    headers.push({ key: 'content-type', value: 'application/problem+json' });
  }
  return headers;
}
