import { readFileSync } from 'node:fs';
import { parse } from 'yaml';
import type { EntryLike } from '../config/match.js';

/** What Tollgate needs to know of an Envoy v3 bootstrap: the HTTP rate-limit filter's settings, the RLS
 * cluster, and the routes with the descriptors they produce. Used to cross-check envoy.yaml against the
 * descriptor config and to replay traffic as Envoy would see it. Only the route features the sidecar uses
 * are understood (path, prefix, path_separated_prefix, safe_regex; header exact, prefix, safe_regex, present);
 * anything else is an error, not a silent guess. */

export type Action =
  | { kind: 'generic_key'; key: string; value: string }
  | { kind: 'request_headers'; header: string; key: string; skipIfAbsent: boolean };

export interface HeaderMatch {
  name: string;
  test: (value: string | undefined) => boolean;
}

export interface RouteSpec {
  index: number;
  matchPath: (path: string) => boolean;
  headers: HeaderMatch[];
  /** One descriptor per rate_limits entry, each a list of actions. */
  rateLimits: Action[][];
}

export interface EnvoyRateLimitSetup {
  file: string;
  domain: string;
  timeoutMs: number;
  failureModeDeny: boolean;
  xRateLimitHeaders: string;
  transportApiVersion: string;
  rls: { cluster: string; address: string; port: number; http2: boolean };
  routes: RouteSpec[];
}

export interface HttpRequestLike {
  method: string;
  path: string;
  /** Lower-case header names. */
  headers: Record<string, string | undefined>;
}

type Obj = Record<string, unknown>;
const RLS_FILTER = 'envoy.filters.http.ratelimit';

export class EnvoyConfigError extends Error {
  override readonly name = 'EnvoyConfigError';
}

export function loadEnvoyConfig(file: string): EnvoyRateLimitSetup {
  return parseEnvoyConfig(parse(readFileSync(file, 'utf8')) as Obj, file);
}

export function parseEnvoyConfig(bootstrap: Obj, file = 'envoy.yaml'): EnvoyRateLimitSetup {
  const fail = (msg: string): never => {
    throw new EnvoyConfigError(`${file}: ${msg}`);
  };
  const resources = (bootstrap.static_resources ?? {}) as Obj;
  const managers = ((resources.listeners ?? []) as Obj[]).flatMap((l) =>
    ((l.filter_chains ?? []) as Obj[]).flatMap((fc) => ((fc.filters ?? []) as Obj[]).map((f) => f.typed_config as Obj)),
  );
  const hcm = managers.find((m) => ((m?.http_filters ?? []) as Obj[]).some((f) => f.name === RLS_FILTER));
  if (!hcm) return fail(`no listener has the ${RLS_FILTER} filter`);
  const filter = ((hcm.http_filters as Obj[]).find((f) => f.name === RLS_FILTER)!.typed_config ?? {}) as Obj;
  const service = (filter.rate_limit_service ?? {}) as Obj;
  const clusterName = String((((service.grpc_service ?? {}) as Obj).envoy_grpc as Obj | undefined)?.cluster_name ?? '');
  const cluster = ((resources.clusters ?? []) as Obj[]).find((c) => c.name === clusterName) ?? fail(`RLS cluster "${clusterName}" is not defined`);
  const endpoint = ((((cluster.load_assignment as Obj).endpoints as Obj[])[0]!.lb_endpoints as Obj[])[0]!.endpoint as Obj).address as Obj;
  const socket = endpoint.socket_address as Obj;
  const protocol = ((cluster.typed_extension_protocol_options ?? {}) as Obj)['envoy.extensions.upstreams.http.v3.HttpProtocolOptions'] as Obj | undefined;
  const routeConfig = (hcm.route_config ?? fail('the rate-limited listener has no inline route_config')) as Obj;
  const routes = ((routeConfig.virtual_hosts as Obj[])[0]!.routes as Obj[]).map((r, i) => parseRoute(r, i, fail));
  return {
    file,
    domain: String(filter.domain ?? ''),
    timeoutMs: durationMs(String(filter.timeout ?? '0.02s')),
    failureModeDeny: filter.failure_mode_deny === true,
    xRateLimitHeaders: String(filter.enable_x_ratelimit_headers ?? 'OFF'),
    transportApiVersion: String(service.transport_api_version ?? ''),
    rls: {
      cluster: clusterName,
      address: String(socket.address),
      port: Number(socket.port_value),
      http2: Boolean(((protocol?.explicit_http_config ?? {}) as Obj).http2_protocol_options),
    },
    routes,
  };
}

function parseRoute(r: Obj, index: number, fail: (m: string) => never): RouteSpec {
  const m = (r.match ?? {}) as Obj;
  let matchPath: (path: string) => boolean;
  if (typeof m.path === 'string') matchPath = (p) => stripQuery(p) === m.path;
  else if (typeof m.path_separated_prefix === 'string') {
    const pre = m.path_separated_prefix;
    matchPath = (p) => stripQuery(p) === pre || stripQuery(p).startsWith(`${pre}/`);
  } else if (typeof m.prefix === 'string') matchPath = (p) => p.startsWith(m.prefix as string);
  else if (m.safe_regex) matchPath = fullMatch(String((m.safe_regex as Obj).regex));
  else return fail(`route ${index}: unsupported match ${JSON.stringify(m)}`);
  const headers = ((m.headers ?? []) as Obj[]).map((h) => parseHeaderMatch(h, index, fail));
  const rateLimits = ((((r.route ?? {}) as Obj).rate_limits ?? []) as Obj[]).map((rl) =>
    ((rl.actions ?? []) as Obj[]).map((a) => parseAction(a, index, fail)),
  );
  return { index, matchPath, headers, rateLimits };
}

function parseHeaderMatch(h: Obj, index: number, fail: (m: string) => never): HeaderMatch {
  const name = String(h.name).toLowerCase();
  const sm = h.string_match as Obj | undefined;
  if (h.present_match === true) return { name, test: (v) => v !== undefined };
  if (sm?.exact !== undefined) return { name, test: (v) => v === sm.exact };
  if (sm?.prefix !== undefined) return { name, test: (v) => v !== undefined && v.startsWith(String(sm.prefix)) };
  if (sm?.safe_regex) {
    const re = fullMatch(String((sm.safe_regex as Obj).regex));
    return { name, test: (v) => v !== undefined && re(v) };
  }
  return fail(`route ${index}: unsupported header match on ${name}`);
}

function parseAction(a: Obj, index: number, fail: (m: string) => never): Action {
  if (a.generic_key) {
    const g = a.generic_key as Obj;
    return { kind: 'generic_key', key: String(g.descriptor_key ?? 'generic_key'), value: String(g.descriptor_value) };
  }
  if (a.request_headers) {
    const h = a.request_headers as Obj;
    return { kind: 'request_headers', header: String(h.header_name).toLowerCase(), key: String(h.descriptor_key), skipIfAbsent: h.skip_if_absent === true };
  }
  return fail(`route ${index}: unsupported rate-limit action ${Object.keys(a).join(', ')}`);
}

/** Envoy's RE2 patterns match the whole value. */
function fullMatch(pattern: string): (s: string) => boolean {
  const re = new RegExp(`^(?:${pattern})$`);
  return (s) => re.test(s);
}

function stripQuery(path: string): string {
  const q = path.indexOf('?');
  return q === -1 ? path : path.slice(0, q);
}

function durationMs(text: string): number {
  const m = /^(\d+(?:\.\d+)?)s$/.exec(text);
  if (!m) throw new EnvoyConfigError(`cannot read duration "${text}"`);
  return Math.round(Number(m[1]) * 1000);
}

/** The first route that matches, as Envoy picks it. */
export function routeFor(setup: EnvoyRateLimitSetup, req: HttpRequestLike): RouteSpec | undefined {
  const header = (name: string): string | undefined => (name === ':method' ? req.method : name === ':path' ? req.path : req.headers[name]);
  return setup.routes.find((r) => r.matchPath(req.path) && r.headers.every((h) => h.test(header(h.name))));
}

/** The descriptors Envoy would send for a request (empty: no call to the rate-limit service). A descriptor
 * whose required header is missing is not sent, as in Envoy. */
export function descriptorsFor(setup: EnvoyRateLimitSetup, req: HttpRequestLike): EntryLike[][] {
  const route = routeFor(setup, req);
  if (!route) return [];
  const out: EntryLike[][] = [];
  for (const actions of route.rateLimits) {
    const entries: EntryLike[] = [];
    let complete = true;
    for (const a of actions) {
      if (a.kind === 'generic_key') entries.push({ key: a.key, value: a.value });
      else {
        const v = req.headers[a.header];
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
