import { readFileSync } from 'node:fs';
import { parse } from 'yaml';
import {
  type Action,
  type ConnectionManagerSpec,
  EnvoyConfigError,
  type EnvoyRateLimitSetup,
  type EscapedSlashesAction,
  type HeaderMatch,
  type RequestType,
  type RouteSpec,
} from './spec.js';

/** envoy.yaml read into an EnvoyRateLimitSetup (spec.ts): the rate-limit filter, the RLS cluster, the
 * connection manager's settings and the routes. A field Tollgate needs and the file lacks is an
 * EnvoyConfigError naming the file and the field's path, never a TypeError. */
type Obj = Record<string, unknown>;
type Fail = (msg: string) => never;
const RLS_FILTER = 'envoy.filters.http.ratelimit';
const MATCH_KEYS = new Set(['prefix', 'path', 'path_separated_prefix', 'safe_regex', 'case_sensitive', 'headers']);

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
  const where = `cluster "${clusterName}"`;
  const socket = at(cluster, ['load_assignment', 'endpoints', 0, 'lb_endpoints', 0, 'endpoint', 'address', 'socket_address'], where, fail) as Obj;
  at(socket, ['address'], `${where} socket_address`, fail);
  at(socket, ['port_value'], `${where} socket_address`, fail);
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
    .map((rl) => ((rl.actions ?? []) as Obj[]).map((a) => parseAction(a, `route ${index}`, fail)));
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

/** One of a RateLimit's actions, as the model knows them (`where`: the route, for the message). */
export function parseAction(a: Obj, where: string, fail: Fail): Action {
  if (a.generic_key) {
    const g = a.generic_key as Obj;
    return { kind: 'generic_key', key: String(g.descriptor_key ?? 'generic_key'), value: String(g.descriptor_value) };
  }
  if (a.request_headers) {
    const h = a.request_headers as Obj;
    return { kind: 'request_headers', header: String(h.header_name).toLowerCase(), key: String(h.descriptor_key), skipIfAbsent: h.skip_if_absent === true };
  }
  if (a.remote_address) return { kind: 'remote_address', key: 'remote_address' };
  return fail(`${where}: unsupported rate-limit action ${Object.keys(a).join(', ')}`);
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

/** The value at `path` below `root`, each step an object key or a list index; a step that is missing (or of
 * the wrong kind) is the module's error naming the path walked, e.g. `cluster "ratelimit".load_assignment is
 * missing`, instead of a TypeError from deep inside. */
function at(root: unknown, path: readonly (string | number)[], where: string, fail: Fail): unknown {
  let value = root;
  let walked = where;
  for (const step of path) {
    walked += typeof step === 'number' ? `[${step}]` : `.${step}`;
    const next = typeof step === 'number' ? (Array.isArray(value) ? value[step] : undefined) : isObj(value) ? value[step] : undefined;
    if (next === undefined || next === null) return fail(`${walked} is missing`);
    value = next;
  }
  return value;
}

function isObj(v: unknown): v is Obj {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
