import { readFileSync } from 'node:fs';
import { parse } from 'yaml';
import type { EntryLike } from '../config/match.js';
import { MAX_UINT32 } from '../config/units.js';
import { loadEnvoyConfig, parseAction } from './bootstrap.js';
import { isInternalRequest, trustedClientAddress } from './internal.js';
import { normalizeRequestPath } from './path.js';
import {
  type Action,
  DEFAULT_PEER,
  EnvoyConfigError,
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

type Routed = Extract<EnvoyOutcome, { kind: 'routed' }>;

/** Everything Envoy does with a request before the upstream: normalisation, routing, internal/external,
 * and the descriptors of the rate-limit call. */
export function envoyOutcome(setup: EnvoyRateLimitSetup, req: HttpRequestLike, options: ModelOptions = {}): EnvoyOutcome {
  const r = routeRequest(setup, req, options);
  if (r.kind !== 'routed') return r;
  return { ...r, descriptors: r.filterApplies ? routeDescriptors(r.route, req.headers, trustedClientAddress(setup.connectionManager, req)) : [] };
}

/** The route a request takes and whether the filter applies to it, before any descriptor is built. */
function routeRequest(setup: EnvoyRateLimitSetup, req: HttpRequestLike, options: ModelOptions): Exclude<EnvoyOutcome, Routed> | Omit<Routed, 'descriptors'> {
  const normalized = normalizeRequestPath(req.path, setup.connectionManager);
  if (normalized.kind === 'rejected') return normalized;
  if (normalized.redirect) return { kind: 'redirect', location: normalized.path };
  const route = findRoute(setup, req, normalized.path);
  if (!route) return { kind: 'no-route', path: normalized.path };
  const internal = isInternalRequest(setup.connectionManager, req, options.envoyVersion ?? PINNED_ENVOY_VERSION);
  const filterApplies = setup.requestType === 'both' || (setup.requestType === 'internal') === internal;
  return { kind: 'routed', path: normalized.path, route, internal, filterApplies };
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
    const entries = entriesOf(actions, headers, client);
    if (entries) out.push(entries);
  }
  return out;
}

/** A descriptor's entries, or none: a request_headers action whose header is absent drops it (unless
 * skip_if_absent), as does having no entry at all. */
function entriesOf(actions: readonly Action[], headers: HttpRequestLike['headers'], client: string): EntryLike[] | undefined {
  const entries: EntryLike[] = [];
  for (const a of actions) {
    if (a.kind === 'generic_key') entries.push({ key: a.key, value: a.value });
    else if (a.kind === 'remote_address') entries.push({ key: a.key, value: client });
    else {
      const v = headers[a.header];
      if (v !== undefined) entries.push({ key: a.key, value: v });
      else if (!a.skipIfAbsent) return undefined;
    }
  }
  return entries.length > 0 ? entries : undefined;
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

/* Both calls of a request. Envoy 1.33 gave a RateLimit entry `hits_addend` (a number, or a format of one
 * substitution) and `apply_on_stream_done` (the entry is sent in a second call when the stream is done, whose
 * answer Envoy ignores); 1.38 gave hits_addend `is_negative_hits`. An entry of RateLimitPerRoute.rate_limits
 * (the route's typed_per_filter_config) replaces the route's own rate_limits for both calls; the stream-done call
 * is built from the same route and headers as the request's, and is sent for a request Envoy refused too
 * (envoyproxy/envoy source/extensions/filters/http/ratelimit/ratelimit.cc: populateRateLimitDescriptors,
 * onDestroy; filters/common/ratelimit_config/ratelimit_config.cc for hits_addend). */

/** Where an entry's hits come from. `response`: a format reading what only the answered stream knows
 * (%DYNAMIC_METADATA(…)%, %RESP(…)%, %TRAILER(…)%, e.g. an AI gateway's token count), which a replay takes from
 * its log's cost column. */
export type HitsAddend =
  | { kind: 'number'; number: number; negative: boolean }
  | { kind: 'request_header'; header: string; negative: boolean }
  | { kind: 'response'; negative: boolean };

export interface RateLimitEntry {
  actions: Action[];
  hitsAddend: HitsAddend | undefined;
  onStreamDone: boolean;
}

/** An Envoy setup with every route's RateLimit entries as Envoy builds both calls from them. */
export interface EnvoyCallSetup extends EnvoyRateLimitSetup {
  /** By route index; a route with no rate limits has no entry. */
  rateLimitEntries: ReadonlyMap<number, readonly RateLimitEntry[]>;
}

/** A descriptor as Envoy sends it: its entries, its own hits_addend, and is_negative_hits. */
export interface EnvoyDescriptor {
  entries: EntryLike[];
  hits?: number;
  negative?: boolean;
}

/** What the stream knows at its end: the cost its response reported (undefined: none, so a `response`
 * hits_addend drops its descriptor), and whether the upstream answered (a refused request's did not). */
export interface StreamFacts {
  cost: number | undefined;
  answered: boolean;
}

export interface EnvoyCalls {
  request: EnvoyDescriptor[];
  streamDone: (facts: StreamFacts) => EnvoyDescriptor[];
  /** An entry reads its hits from the response: a logged cost is then the response's, not the request's. */
  costFromResponse: boolean;
}

/** Envoy drops a descriptor whose format hits_addend is not a number from 0 to this (ratelimit_config.cc). */
const MAX_FORMAT_HITS = 1_000_000_000;
const RESPONSE_SOURCES = new Set(['DYNAMIC_METADATA', 'RESP', 'TRAILER']);

export function loadEnvoyCallSetup(file: string): EnvoyCallSetup {
  const setup = loadEnvoyConfig(file);
  return { ...setup, rateLimitEntries: rateLimitEntries(parse(readFileSync(file, 'utf8')) as Obj, file) };
}

/** The descriptors of both calls of a request (undefined: Envoy makes neither: no route, or the filter does not
 * apply). A setup without entries (loadEnvoyConfig's) sends only the request's call. */
export function envoyCalls(setup: EnvoyRateLimitSetup | EnvoyCallSetup, req: HttpRequestLike, options: ModelOptions = {}): EnvoyCalls | undefined {
  const routed = routeRequest(setup, req, options);
  if (routed.kind !== 'routed' || !routed.filterApplies) return undefined;
  const client = trustedClientAddress(setup.connectionManager, req);
  const entries = 'rateLimitEntries' in setup ? setup.rateLimitEntries.get(routed.route.index) : undefined;
  if (!entries)
    return { request: routeDescriptors(routed.route, req.headers, client).map((e) => ({ entries: e })), streamDone: () => [], costFromResponse: false };
  let costFromResponse = false;
  for (const e of entries) if (e.hitsAddend?.kind === 'response') costFromResponse = true;
  return {
    request: phaseDescriptors(entries, false, req.headers, client, undefined),
    streamDone: (facts) => phaseDescriptors(entries, true, req.headers, client, facts),
    costFromResponse,
  };
}

/** One call's descriptors: the entries of its phase that make one (a replay builds them for every line). */
function phaseDescriptors(
  entries: readonly RateLimitEntry[],
  done: boolean,
  headers: HttpRequestLike['headers'],
  client: string,
  facts: StreamFacts | undefined,
): EnvoyDescriptor[] {
  const out: EnvoyDescriptor[] = [];
  for (const e of entries) {
    const d = e.onStreamDone === done ? envoyDescriptor(e, headers, client, facts) : undefined;
    if (d) out.push(d);
  }
  return out;
}

function envoyDescriptor(e: RateLimitEntry, headers: HttpRequestLike['headers'], client: string, facts: StreamFacts | undefined): EnvoyDescriptor | undefined {
  const entries = entriesOf(e.actions, headers, client);
  const h = e.hitsAddend;
  if (!entries) return undefined;
  if (!h) return { entries };
  let hits: number | undefined = h.kind === 'number' ? h.number : undefined;
  if (h.kind !== 'number') {
    const text = h.kind === 'request_header' ? headers[h.header] : facts?.answered ? facts.cost : undefined;
    const n = text === undefined || text === '' ? NaN : Number(text);
    // Not a number, or out of Envoy's range: Envoy drops the descriptor (nothing is sent for it).
    if (!(n >= 0 && n <= MAX_FORMAT_HITS)) return undefined;
    hits = Math.trunc(n);
  }
  return h.negative ? { entries, hits, negative: true } : { entries, hits };
}

type Obj = Record<string, unknown>;
const RLS_FILTER = 'envoy.filters.http.ratelimit';

/** Every route's entries, read from the bootstrap as loadEnvoyConfig reads its routes (the same listener,
 * virtual host and order): RateLimitPerRoute.rate_limits of the most specific typed_per_filter_config (route,
 * virtual host, route config) when it has some, else the route's rate_limits of the filter's stage. */
function rateLimitEntries(bootstrap: Obj, file: string): Map<number, RateLimitEntry[]> {
  const fail = (msg: string): never => {
    throw new EnvoyConfigError(`${file}: ${msg}`);
  };
  const listeners = (((bootstrap.static_resources ?? {}) as Obj).listeners ?? []) as Obj[];
  const managers = listeners.flatMap((l) =>
    ((l.filter_chains ?? []) as Obj[]).flatMap((fc) => ((fc.filters ?? []) as Obj[]).map((f) => f.typed_config as Obj)),
  );
  const hcm = managers.find((m) => ((m?.http_filters ?? []) as Obj[]).some((f) => f.name === RLS_FILTER))!;
  const filter = ((hcm.http_filters as Obj[]).find((f) => f.name === RLS_FILTER)!.typed_config ?? {}) as Obj;
  if (filter.rate_limits !== undefined) fail("the rate-limit filter's own rate_limits are not modelled");
  const routeConfig = hcm.route_config as Obj;
  const host = (routeConfig.virtual_hosts as Obj[])[0]!;
  const perFilter = (o: Obj): Obj | undefined => ((o.typed_per_filter_config ?? {}) as Obj)[RLS_FILTER] as Obj | undefined;
  const stage = Number(filter.stage ?? 0);
  const out = new Map<number, RateLimitEntry[]>();
  ((host.routes ?? []) as Obj[]).forEach((r, i) => {
    const per = perFilter(r) ?? perFilter(host) ?? perFilter(routeConfig);
    if (per?.domain !== undefined) fail(`route ${i}: RateLimitPerRoute.domain is not modelled`);
    const own = (per?.rate_limits ?? []) as Obj[];
    const listed = own.length > 0 ? own : (((r.route ?? {}) as Obj).rate_limits as Obj[] | undefined)?.filter((rl) => Number(rl.stage ?? 0) === stage);
    const entries = (listed ?? []).map((rl) => rateLimitEntry(rl, `route ${i}`, own.length > 0, fail));
    if (entries.length > 0) out.set(i, entries);
  });
  return out;
}

function rateLimitEntry(rl: Obj, where: string, perRoute: boolean, fail: (msg: string) => never): RateLimitEntry {
  // Envoy refuses these in RateLimitPerRoute.rate_limits (ratelimit_config.cc): the file would not load.
  if (perRoute && (rl.stage !== undefined || rl.disable_key !== undefined || rl.limit !== undefined))
    fail(`${where}: stage, disable_key and limit are refused in RateLimitPerRoute.rate_limits`);
  const actions = ((rl.actions ?? []) as Obj[]).map((a) => parseAction(a, where, fail));
  const h = rl.hits_addend as Obj | undefined;
  return { actions, hitsAddend: h === undefined ? undefined : hitsAddendOf(h, where, fail), onStreamDone: rl.apply_on_stream_done === true };
}

/** `{number: N}` (a UInt64Value: a scalar or `{value: N}`) or `{format: "%SOURCE(…)%"}`, never both. */
function hitsAddendOf(h: Obj, where: string, fail: (msg: string) => never): HitsAddend {
  const negative = h.is_negative_hits === true;
  const format = typeof h.format === 'string' && h.format !== '' ? h.format : undefined;
  if ((format === undefined) === (h.number === undefined)) fail(`${where}: hits_addend must have either a format or a number`);
  if (format === undefined) {
    const n = Number(typeof h.number === 'object' && h.number !== null ? (h.number as Obj).value : h.number);
    if (!Number.isInteger(n) || n < 0 || n > MAX_UINT32) fail(`${where}: hits_addend.number must be a whole number from 0 to ${MAX_UINT32}`);
    return { kind: 'number', number: n, negative };
  }
  const m = /^%([A-Z_]+)\(([^)?]+)\)(?::\d+)?%$/.exec(format!);
  if (m?.[1] === 'REQ') return { kind: 'request_header', header: m[2]!.toLowerCase(), negative };
  if (m && RESPONSE_SOURCES.has(m[1]!)) return { kind: 'response', negative };
  return fail(
    `${where}: hits_addend format ${JSON.stringify(format!.slice(0, 80))} is not modelled (one of %REQ(…)%, %DYNAMIC_METADATA(…)%, %RESP(…)%, %TRAILER(…)%)`,
  );
}
