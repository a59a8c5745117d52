import type { EntryLike } from '../config/match.js';
import { isInternalRequest, trustedClientAddress } from './internal.js';
import { normalizeRequestPath } from './path.js';
import {
  DEFAULT_PEER,
  type EnvoyOutcome,
  type EnvoyRateLimitSetup,
  type HttpRequestLike,
  type ModelOptions,
  PINNED_ENVOY_VERSION,
  type RouteSpec,
} from './spec.js';

export { loadEnvoyConfig } from './bootstrap.js';
export { canonicalizePath, type NormalizedPath, normalizeRequestPath } from './path.js';
/** Routes and descriptors: which route a request takes after Envoy's normalisation, and the descriptors its
 * rate_limits actions produce. The Envoy model's public face: the rest of src/envoy/ is re-exported here. */
export * from './spec.js';

function findRoute(setup: EnvoyRateLimitSetup, req: HttpRequestLike, path: string): RouteSpec | undefined {
  // Path matchers never match CONNECT over HTTP/1.1: only connect_matcher does, and the sidecar has none.
  if (req.method === 'CONNECT') return undefined;
  const header = (name: string): string | undefined => (name === ':method' ? req.method : name === ':path' ? path : req.headers[name]);
  return setup.routes.find((r) => r.matchPath(path) && r.headers.every((h) => h.test(header(h.name))));
}

/** Everything Envoy does with a request before the upstream: normalisation, routing, internal/external,
 * and the descriptors of the rate-limit call. */
export function envoyOutcome(setup: EnvoyRateLimitSetup, req: HttpRequestLike, options: ModelOptions = {}): EnvoyOutcome {
  const normalized = normalizeRequestPath(req.path, setup.connectionManager);
  if (normalized.kind === 'rejected') return normalized;
  if (normalized.redirect) return { kind: 'redirect', location: normalized.path };
  const route = findRoute(setup, req, normalized.path);
  if (!route) return { kind: 'no-route', path: normalized.path };
  const internal = isInternalRequest(setup.connectionManager, req, options.envoyVersion ?? PINNED_ENVOY_VERSION);
  const filterApplies = setup.requestType === 'both' || (setup.requestType === 'internal') === internal;
  const descriptors = filterApplies ? routeDescriptors(route, req.headers, trustedClientAddress(setup.connectionManager, req)) : [];
  return { kind: 'routed', path: normalized.path, route, internal, filterApplies, descriptors };
}

/** The descriptors Envoy would send for a request (empty: no call to the rate-limit service). A descriptor
 * whose required header is missing is not sent, as in Envoy. */
export function descriptorsFor(setup: EnvoyRateLimitSetup, req: HttpRequestLike, options: ModelOptions = {}): EntryLike[][] {
  const outcome = envoyOutcome(setup, req, options);
  return outcome.kind === 'routed' ? outcome.descriptors : [];
}

function routeDescriptors(route: RouteSpec, headers: HttpRequestLike['headers'], client: string): EntryLike[][] {
  const out: EntryLike[][] = [];
  for (const actions of route.rateLimits) {
    const entries: EntryLike[] = [];
    let complete = true;
    for (const a of actions) {
      if (a.kind === 'generic_key') entries.push({ key: a.key, value: a.value });
      else if (a.kind === 'remote_address') entries.push({ key: a.key, value: client });
      else {
        const v = headers[a.header];
        if (v !== undefined) entries.push({ key: a.key, value: v });
        else if (!a.skipIfAbsent) complete = false;
      }
    }
    if (complete && entries.length > 0) out.push(entries);
  }
  return out;
}

/** Every shape of descriptor the routes can produce, with `sample` standing for header values. */
export function possibleDescriptors(setup: EnvoyRateLimitSetup, sample = 'Bearer sample-token'): EntryLike[][] {
  const out: EntryLike[][] = [];
  for (const route of setup.routes) {
    for (const actions of route.rateLimits) {
      let variants: EntryLike[][] = [[]];
      for (const a of actions) {
        if (a.kind === 'generic_key') variants = variants.map((v) => [...v, { key: a.key, value: a.value }]);
        else if (a.kind === 'remote_address') variants = variants.map((v) => [...v, { key: a.key, value: DEFAULT_PEER }]);
        else {
          const withIt = variants.map((v) => [...v, { key: a.key, value: sample }]);
          variants = a.skipIfAbsent ? [...withIt, ...variants] : withIt;
        }
      }
      out.push(...variants.filter((v) => v.length > 0));
    }
  }
  return out;
}
