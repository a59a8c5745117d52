import { readFileSync } from 'node:fs';
import { BlockList, isIP } from 'node:net';
import { parse } from 'yaml';
import type { EntryLike } from '../config/match.js';

/** What Tollgate needs to know of an Envoy v3 bootstrap: the HTTP rate-limit filter's settings, the RLS
 * cluster, the connection manager's settings that decide which path a route sees and whether a request is
 * internal, and the routes with the descriptors they produce. Used to cross-check envoy.yaml against the
 * descriptor config, to replay traffic as Envoy would see it, and to prove that no spelling of a request
 * escapes its limit. Only the features the sidecar uses are understood (path, prefix, path_separated_prefix,
 * safe_regex, case_sensitive; header exact, prefix, safe_regex, present; generic_key and request_headers
 * actions); anything else is an error, not a silent guess.
 *
 * Envoy's behaviour is followed as documented and as its source does it (references in docs/security.md, "Security
 * choices"): path normalisation is the Chromium URL path canonicaliser Envoy uses (RFC 3986 dot segments,
 * percent-escapes of unreserved characters decoded, backslash as slash), then merge_slashes; escaped
 * slashes are handled before both; a request is internal only as ConnectionManagerUtility decides it. */

export type Action =
  | { kind: 'generic_key'; key: string; value: string }
  | { kind: 'request_headers'; header: string; key: string; skipIfAbsent: boolean }
  /** Envoy's remote_address action: ("remote_address", the trusted client address), and no descriptor at
   * all when there is none (Envoy's RemoteAddressAction; docs: "trusted address from x-forwarded-for"). */
  | { kind: 'remote_address'; key: 'remote_address' };

export interface HeaderMatch {
  name: string;
  test: (value: string | undefined) => boolean;
}

export interface RouteSpec {
  index: number;
  /** Called with the path as Envoy has normalised it (query included). */
  matchPath: (path: string) => boolean;
  headers: HeaderMatch[];
  /** One descriptor per rate_limits entry (of the filter's stage), each a list of actions. */
  rateLimits: Action[][];
}

export type EscapedSlashesAction = 'KEEP_UNCHANGED' | 'REJECT_REQUEST' | 'UNESCAPE_AND_REDIRECT' | 'UNESCAPE_AND_FORWARD';

export interface ConnectionManagerSpec {
  useRemoteAddress: boolean;
  xffNumTrustedHops: number;
  /** internal_address_config: its CIDRs; 'rfc1918' when present without CIDRs (the documented fallback);
   * 'envoy-default' when absent (RFC 1918 before Envoy 1.33, nothing from 1.33 on). */
  internalAddresses: string[] | 'rfc1918' | 'envoy-default';
  normalizePath: boolean;
  mergeSlashes: boolean;
  escapedSlashes: EscapedSlashesAction;
}

export type RequestType = 'internal' | 'external' | 'both';

export interface EnvoyRateLimitSetup {
  file: string;
  domain: string;
  timeoutMs: number;
  failureModeDeny: boolean;
  xRateLimitHeaders: string;
  transportApiVersion: string;
  requestType: RequestType;
  rls: { cluster: string; address: string; port: number; http2: boolean };
  connectionManager: ConnectionManagerSpec;
  routes: RouteSpec[];
}

export interface HttpRequestLike {
  method: string;
  path: string;
  /** Lower-case header names. */
  headers: Record<string, string | undefined>;
  /** The TCP peer Envoy sees (default: a pod-network address, as behind kube-proxy or a load balancer). */
  remoteAddress?: string;
}

/** What Envoy does with a request: answers it itself (400, redirect, 404 for no route) or routes it, calling
 * the rate-limit service first when `descriptors` is not empty. */
export type EnvoyOutcome =
  | { kind: 'rejected'; status: 400; reason: string }
  | { kind: 'redirect'; location: string }
  | { kind: 'no-route'; path: string }
  | { kind: 'routed'; path: string; route: RouteSpec; internal: boolean; filterApplies: boolean; descriptors: EntryLike[][] };

export interface ModelOptions {
  /** The Envoy release the file runs on; it decides the default of internal_address_config. */
  envoyVersion?: string;
}

/** The Envoy release the shipped manifests pin (deploy/kubernetes, docker-compose.yml; a test keeps them equal). */
export const PINNED_ENVOY_VERSION = '1.37.10';
/** A peer on the pod network: what Envoy sees when a request comes through kube-proxy or a load balancer. */
export const DEFAULT_PEER = '10.244.0.1';

type Obj = Record<string, unknown>;
type Fail = (msg: string) => never;
const RLS_FILTER = 'envoy.filters.http.ratelimit';
const MATCH_KEYS = new Set(['prefix', 'path', 'path_separated_prefix', 'safe_regex', 'case_sensitive', 'headers']);

export class EnvoyConfigError extends Error {
  override readonly name = 'EnvoyConfigError';
}

export function loadEnvoyConfig(file: string): EnvoyRateLimitSetup {
  return parseEnvoyConfig(parse(readFileSync(file, 'utf8')) as Obj, file);
}

function parseEnvoyConfig(bootstrap: Obj, file = 'envoy.yaml'): EnvoyRateLimitSetup {
  const fail: Fail = (msg) => {
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
  return {
    file,
    domain: String(filter.domain ?? ''),
    timeoutMs: durationMs(String(filter.timeout ?? '0.02s')),
    failureModeDeny: filter.failure_mode_deny === true,
    xRateLimitHeaders: String(filter.enable_x_ratelimit_headers ?? 'OFF'),
    transportApiVersion: String(service.transport_api_version ?? ''),
    requestType: parseRequestType(filter.request_type, fail),
    rls: {
      cluster: clusterName,
      address: String(socket.address),
      port: Number(socket.port_value),
      http2: Boolean(((protocol?.explicit_http_config ?? {}) as Obj).http2_protocol_options),
    },
    connectionManager: parseConnectionManager(hcm, fail),
    routes: parseRoutes(hcm, Number(filter.stage ?? 0), fail),
  };
}

function parseRequestType(value: unknown, fail: Fail): RequestType {
  // The filter's default ('' or absent) is both.
  if (value === undefined || value === '' || value === 'both') return 'both';
  if (value === 'internal' || value === 'external') return value;
  return fail(`rate-limit filter: unknown request_type ${JSON.stringify(value)}`);
}

function parseConnectionManager(hcm: Obj, fail: Fail): ConnectionManagerSpec {
  for (const key of ['original_ip_detection_extensions', 'typed_header_validation_config', 'skip_xff_append']) {
    if (hcm[key] !== undefined) fail(`http_connection_manager: ${key} is not modelled`);
  }
  const iac = hcm.internal_address_config as Obj | undefined;
  const cidrs = ((iac?.cidr_ranges ?? []) as Obj[]).map((c) => `${String(c.address_prefix)}/${Number(c.prefix_len ?? 0)}`);
  const action = String(hcm.path_with_escaped_slashes_action ?? 'IMPLEMENTATION_SPECIFIC_DEFAULT');
  const escapedSlashes = action === 'IMPLEMENTATION_SPECIFIC_DEFAULT' ? 'KEEP_UNCHANGED' : action;
  if (!['KEEP_UNCHANGED', 'REJECT_REQUEST', 'UNESCAPE_AND_REDIRECT', 'UNESCAPE_AND_FORWARD'].includes(escapedSlashes)) {
    fail(`http_connection_manager: unknown path_with_escaped_slashes_action ${action}`);
  }
  return {
    useRemoteAddress: hcm.use_remote_address === true,
    xffNumTrustedHops: Number(hcm.xff_num_trusted_hops ?? 0),
    internalAddresses: iac === undefined ? 'envoy-default' : cidrs.length === 0 ? 'rfc1918' : cidrs,
    normalizePath: hcm.normalize_path === true,
    mergeSlashes: hcm.merge_slashes === true,
    escapedSlashes: escapedSlashes as EscapedSlashesAction,
  };
}

function parseRoutes(hcm: Obj, stage: number, fail: Fail): RouteSpec[] {
  const routeConfig = (hcm.route_config ?? fail('the rate-limited listener has no inline route_config')) as Obj;
  const hosts = (routeConfig.virtual_hosts ?? []) as Obj[];
  if (hosts.length !== 1) fail(`expected one virtual host, found ${hosts.length}`);
  if (hosts[0]!.rate_limits !== undefined) fail('virtual host rate_limits are not modelled');
  return ((hosts[0]!.routes ?? []) as Obj[]).map((r, i) => parseRoute(r, i, stage, fail));
}

function parseRoute(r: Obj, index: number, stage: number, fail: Fail): RouteSpec {
  const m = (r.match ?? {}) as Obj;
  const unknown = Object.keys(m).filter((k) => !MATCH_KEYS.has(k));
  if (unknown.length > 0) fail(`route ${index}: unsupported match ${unknown.join(', ')}`);
  const headers = ((m.headers ?? []) as Obj[]).map((h) => parseHeaderMatch(h, index, fail));
  const route = (r.route ?? {}) as Obj;
  if (route.include_vh_rate_limits !== undefined) fail(`route ${index}: include_vh_rate_limits is not modelled`);
  const rateLimits = ((route.rate_limits ?? []) as Obj[])
    .filter((rl) => Number(rl.stage ?? 0) === stage)
    .map((rl) => ((rl.actions ?? []) as Obj[]).map((a) => parseAction(a, index, fail)));
  return { index, matchPath: parsePathMatch(m, index, fail), headers, rateLimits };
}

/** Envoy compares paths ignoring ASCII case when case_sensitive is false (safe_regex ignores the flag). */
function parsePathMatch(m: Obj, index: number, fail: Fail): (path: string) => boolean {
  const fold = m.case_sensitive === false ? asciiLower : (s: string): string => s;
  if (typeof m.path === 'string') {
    const want = fold(m.path);
    return (p) => fold(stripQuery(p)) === want;
  }
  if (typeof m.path_separated_prefix === 'string') {
    const pre = fold(m.path_separated_prefix);
    return (p) => {
      const path = fold(stripQuery(p));
      return path === pre || path.startsWith(`${pre}/`);
    };
  }
  if (typeof m.prefix === 'string') {
    const pre = fold(m.prefix);
    return (p) => fold(p).startsWith(pre);
  }
  if (m.safe_regex) {
    const re = fullMatch(String((m.safe_regex as Obj).regex));
    return (p) => re(stripQuery(p));
  }
  return fail(`route ${index}: unsupported match ${JSON.stringify(m)}`);
}

function parseHeaderMatch(h: Obj, index: number, fail: Fail): HeaderMatch {
  const name = String(h.name).toLowerCase();
  if (h.invert_match !== undefined || h.treat_missing_header_as_empty !== undefined) fail(`route ${index}: unsupported header match options on ${name}`);
  const sm = h.string_match as Obj | undefined;
  const fold = sm?.ignore_case === true ? asciiLower : (s: string): string => s;
  if (h.present_match === true) return { name, test: (v) => v !== undefined };
  if (sm?.exact !== undefined) return { name, test: (v) => v !== undefined && fold(v) === fold(String(sm.exact)) };
  if (sm?.prefix !== undefined) return { name, test: (v) => v !== undefined && fold(v).startsWith(fold(String(sm.prefix))) };
  if (sm?.safe_regex) {
    const re = fullMatch(String((sm.safe_regex as Obj).regex));
    return { name, test: (v) => v !== undefined && re(v) };
  }
  return fail(`route ${index}: unsupported header match on ${name}`);
}

function parseAction(a: Obj, index: number, fail: Fail): Action {
  if (a.generic_key) {
    const g = a.generic_key as Obj;
    return { kind: 'generic_key', key: String(g.descriptor_key ?? 'generic_key'), value: String(g.descriptor_value) };
  }
  if (a.request_headers) {
    const h = a.request_headers as Obj;
    return { kind: 'request_headers', header: String(h.header_name).toLowerCase(), key: String(h.descriptor_key), skipIfAbsent: h.skip_if_absent === true };
  }
  if (a.remote_address) return { kind: 'remote_address', key: 'remote_address' };
  return fail(`route ${index}: unsupported rate-limit action ${Object.keys(a).join(', ')}`);
}

/** Envoy's RE2 patterns match the whole value. */
function fullMatch(pattern: string): (s: string) => boolean {
  const re = new RegExp(`^(?:${pattern})$`);
  return (s) => re.test(s);
}

function asciiLower(s: string): string {
  return s.replace(/[A-Z]/g, (c) => c.toLowerCase());
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

// ---- Path normalisation, in the order ConnectionManagerUtility::maybeNormalizePath applies it ----

export type NormalizedPath = { kind: 'ok'; path: string; redirect: boolean } | { kind: 'rejected'; status: 400; reason: string };

/** The :path routes and filters see: fragment dropped, escaped slashes handled, then (if on) the RFC 3986
 * canonicalisation and slash merging. Each step works on the path before the query only. */
export function normalizeRequestPath(path: string, cm: ConnectionManagerSpec): NormalizedPath {
  let p = path.includes('#') ? path.slice(0, path.indexOf('#')) : path;
  let redirect = false;
  if (cm.escapedSlashes !== 'KEEP_UNCHANGED') {
    const unescaped = onPathPart(p, (part) => part.replace(/%2f/gi, '/').replace(/%5c/gi, '\\'));
    if (unescaped !== p) {
      if (cm.escapedSlashes === 'REJECT_REQUEST') return { kind: 'rejected', status: 400, reason: 'escaped slash' };
      redirect = cm.escapedSlashes === 'UNESCAPE_AND_REDIRECT';
      p = unescaped;
    }
  }
  if (cm.normalizePath) {
    const q = p.indexOf('?');
    const canonical = canonicalizePath(q === -1 ? p : p.slice(0, q));
    if (canonical === undefined) return { kind: 'rejected', status: 400, reason: 'path normalisation failed' };
    p = canonical + (q === -1 ? '' : p.slice(q));
  }
  if (cm.mergeSlashes) p = onPathPart(p, mergeSlashes);
  return { kind: 'ok', path: p, redirect };
}

function onPathPart(path: string, f: (part: string) => string): string {
  const q = path.indexOf('?');
  return q === -1 ? f(path) : f(path.slice(0, q)) + path.slice(q);
}

function mergeSlashes(part: string): string {
  if (!part.includes('//')) return part;
  const inner = part.split('/').filter((s) => s !== '').join('/');
  return (part.startsWith('/') ? '/' : '') + inner + (part.endsWith('/') ? '/' : '');
}

// Character classes of Chromium's kPathCharLookup (url_canon_path.cc), which Envoy's normalize_path uses.
const PASS = 0;
const SPECIAL = 1;
const ESCAPE = 3;
const UNESCAPE = 4;
const INVALID = 9;
const PATH_CHARS: Uint8Array = (() => {
  const t = new Uint8Array(256).fill(ESCAPE); // controls, space and every byte >= 0x7f are escaped
  t[0] = INVALID;
  for (const c of "!$&'()*+,/:;=@[]") t[c.charCodeAt(0)] = PASS;
  for (const c of '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-_~') t[c.charCodeAt(0)] = UNESCAPE;
  t['.'.charCodeAt(0)] = SPECIAL;
  return t;
})();

/** Chromium's CanonicalizePath on the path before the query: dot segments (also written %2e) resolved,
 * backslashes made slashes, escapes of unreserved characters (A-Z a-z 0-9 - . _ ~) decoded, other escapes
 * kept as sent, characters that must be escaped escaped. Undefined where Chromium reports failure (NUL),
 * which Envoy answers with 400. Its nested-escape repair (%%30%30) is not modelled. */
export function canonicalizePath(part: string): string | undefined {
  const src = Array.from(new TextEncoder().encode(part));
  const out: number[] = [];
  let ok = true;
  if (src[0] !== 0x2f && src[0] !== 0x5c) out.push(0x2f);
  for (let i = 0; i < src.length; i++) {
    const ch = src[i]!;
    const flags = PATH_CHARS[ch]!;
    if (!(flags & SPECIAL)) {
      out.push(ch);
      continue;
    }
    const dot = dotLength(src, i);
    if (dot > 0) i = handleDot(src, i, dot, out);
    else if (ch === 0x5c) out.push(0x2f);
    else if (ch === 0x25) i = handlePercent(src, i, out, () => (ok = false));
    else {
      if (flags === INVALID) ok = false;
      out.push(...escaped(ch));
    }
  }
  return ok ? Buffer.from(out).toString('latin1') : undefined; // every byte left is ASCII
}

function dotLength(src: number[], i: number): number {
  if (src[i] === 0x2e) return 1;
  const isE = src[i + 2] === 0x65 || src[i + 2] === 0x45;
  return src[i] === 0x25 && src[i + 1] === 0x32 && isE ? 3 : 0;
}

const isSlash = (c: number | undefined): boolean => c === 0x2f || c === 0x5c;

/** A dot after a slash is a segment: "." is dropped, ".." removes the previous segment. Returns the last
 * input index consumed. */
function handleDot(src: number[], i: number, dot: number, out: number[]): number {
  if (out[out.length - 1] !== 0x2f) {
    out.push(0x2e);
    return i + dot - 1;
  }
  const after = i + dot;
  if (after === src.length) return after - 1;
  if (isSlash(src[after])) return after;
  const second = dotLength(src, after);
  const afterSecond = after + second;
  if (second > 0 && (afterSecond === src.length || isSlash(src[afterSecond]))) {
    backUpToPreviousSlash(out);
    return afterSecond === src.length ? afterSecond - 1 : afterSecond;
  }
  out.push(0x2e);
  return i + dot - 1;
}

function backUpToPreviousSlash(out: number[]): void {
  let i = out.length - 1;
  if (i === 0) return;
  i--;
  while (out[i] !== 0x2f && i > 0) i--;
  out.length = i + 1;
}

function handlePercent(src: number[], i: number, out: number[], invalid: () => void): number {
  const hex = (c: number | undefined): number => (c === undefined ? -1 : parseInt(String.fromCharCode(c), 16));
  const hi = hex(src[i + 1]);
  const lo = hex(src[i + 2]);
  if (Number.isNaN(hi) || Number.isNaN(lo) || hi < 0 || lo < 0) {
    out.push(0x25); // an invalid escape passes through
    return i;
  }
  const value = hi * 16 + lo;
  const flags = PATH_CHARS[value]!;
  if (flags === UNESCAPE) out.push(value);
  else {
    out.push(0x25, src[i + 1]!, src[i + 2]!); // kept exactly as sent, hex case included
    if (flags === INVALID) invalid();
  }
  return i + 2;
}

function escaped(byte: number): number[] {
  return Array.from(`%${byte.toString(16).toUpperCase().padStart(2, '0')}`, (c) => c.charCodeAt(0));
}

// ---- Internal or external, as ConnectionManagerUtility::mutateRequestHeaders decides ----

/** Envoy's Network::Utility::isInternalAddress: RFC 1918, IPv4 loopback, fd00::/8, ::1. */
const RFC1918 = cidrList(['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16', '127.0.0.1/32', 'fd00::/8', '::1/128']);

function cidrList(cidrs: string[]): BlockList {
  const list = new BlockList();
  for (const c of cidrs) {
    const [address, len] = c.split('/') as [string, string];
    list.addSubnet(address, Number(len), isIP(address) === 6 ? 'ipv6' : 'ipv4');
  }
  return list;
}

function versionAtLeast(version: string, major: number, minor: number): boolean {
  const [ma = 0, mi = 0] = version.replace(/^v/, '').split('.').map(Number);
  return ma > major || (ma === major && mi >= minor);
}

function isInternalAddress(address: string, cm: ConnectionManagerSpec, version: string): boolean {
  const type = isIP(address) === 6 ? 'ipv6' : 'ipv4';
  if (isIP(address) === 0) return false;
  if (Array.isArray(cm.internalAddresses)) return cidrList(cm.internalAddresses).check(address, type);
  // From 1.33 an absent internal_address_config trusts no address (changelog 1.33.0, "http").
  if (cm.internalAddresses === 'envoy-default' && versionAtLeast(version, 1, 33)) return false;
  return RFC1918.check(address, type);
}

/** The address the XFF header names `skip` hops from its right end, and whether it holds a single address
 * (Utility::getLastAddressFromXFF): only then may it make the request internal. */
function addressFromXff(xff: string, skip: number): { address?: string; single: boolean } {
  const parts = xff.split(',');
  const address = parts[parts.length - 1 - skip]?.trim();
  return { address: address && isIP(address) ? address : undefined, single: parts.length === 1 && skip === 0 };
}

/** Whether Envoy marks the request internal (x-envoy-internal: true). With use_remote_address the peer
 * decides, and only when the request carries no XFF; without it, a single-address XFF does. A client's own
 * x-envoy-internal header is always removed first, so it never counts. */
function isInternalRequest(cm: ConnectionManagerSpec, req: HttpRequestLike, version = PINNED_ENVOY_VERSION): boolean {
  const xff = req.headers['x-forwarded-for'];
  const peer = req.remoteAddress ?? DEFAULT_PEER;
  if (cm.useRemoteAddress) return xff === undefined && isInternalAddress(peer, cm, version);
  if (xff === undefined) return false;
  const { address, single } = addressFromXff(xff, cm.xffNumTrustedHops);
  return single && address !== undefined && isInternalAddress(address, cm, version);
}

// ---- Routes and descriptors ----

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

/** The client address Envoy trusts (the HCM's downstream remote address): with use_remote_address, the
 * peer when no XFF hop is trusted, else the address that many hops from the right of the client's XFF;
 * without it, the XFF address past the trusted hops. When XFF is missing, too short or not an address,
 * Envoy keeps the peer. */
function trustedClientAddress(cm: ConnectionManagerSpec, req: HttpRequestLike): string {
  const peer = req.remoteAddress ?? DEFAULT_PEER;
  const xff = req.headers['x-forwarded-for'];
  if ((cm.useRemoteAddress && cm.xffNumTrustedHops === 0) || xff === undefined) return peer;
  return addressFromXff(xff, cm.useRemoteAddress ? cm.xffNumTrustedHops - 1 : cm.xffNumTrustedHops).address ?? peer;
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
