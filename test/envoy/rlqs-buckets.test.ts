import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { type EnvoyRateLimitSetup, envoyOutcome, type HttpRequestLike, loadEnvoyConfig, normalizeRequestPath } from '../../src/envoy/routes.js';

// Replays requests through a model of the rate_limit_quota filter's bucket_matchers in envoy/envoy-rlqs.yaml,
// as docs/design/rlqs-envoy.md §6 has Envoy do it: the first matcher that matches wins; no match and no
// on_no_match means no bucket (the request passes, uncounted); a custom_value whose header is absent means the
// request passes uncounted too (a bypass), and an empty one drops its key. Only what the file uses is modelled
// (HTTP request header inputs, string matchers, and/or/not); anything else throws rather than guessing.

type Obj = Record<string, unknown>;
type Req = Pick<HttpRequestLike, 'method' | 'path' | 'headers'>;
type Outcome = { kind: 'bucket'; id: Record<string, string> } | { kind: 'unmatched' } | { kind: 'uncounted'; key: string };

const RLQS_FILE = 'envoy/envoy-rlqs.yaml';
const HEADER_INPUT = 'type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput';
const BUCKET_SETTINGS = 'type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings';
const TOKEN = 'Bearer abc';

function obj(v: unknown, what: string): Obj {
  if (v !== null && typeof v === 'object' && !Array.isArray(v)) return v as Obj;
  throw new Error(`${what}: expected a mapping`);
}

function list(v: unknown, what: string): Obj[] {
  if (!Array.isArray(v)) throw new Error(`${what}: expected a list`);
  return v.map((x, i) => obj(x, `${what}[${i}]`));
}

/** The filter's config and the HTTP connection manager around it, from a parsed bootstrap. */
function listenerParts(doc: Obj): { hcm: Obj; filters: Obj[] } {
  const listener = list(obj(doc.static_resources, 'static_resources').listeners, 'listeners').find((l) => l.name === 'property_api')!;
  const chain = list(listener.filter_chains, 'filter_chains')[0]!;
  const hcm = obj(list(chain.filters, 'filters')[0]!.typed_config, 'hcm');
  return { hcm, filters: list(hcm.http_filters, 'http_filters') };
}

const rlqsDoc = obj(parse(readFileSync(RLQS_FILE, 'utf8')), RLQS_FILE);
const rlsDoc = obj(parse(readFileSync('envoy/envoy.yaml', 'utf8')), 'envoy.yaml');
const quotaFilter = obj(listenerParts(rlqsDoc).filters.find((f) => f.name === 'envoy.filters.http.rate_limit_quota')?.typed_config, 'rate_limit_quota');
const bucketMatchers = obj(quotaFilter.bucket_matchers, 'bucket_matchers');

/** The value an input extension reads: a request header (pseudo-headers included), undefined when absent. */
function readInput(ext: unknown, req: Req): string | undefined {
  const config = obj(obj(ext, 'input').typed_config, 'input.typed_config');
  if (config['@type'] !== HEADER_INPUT) throw new Error(`input ${String(config['@type'])} is not modelled`);
  const name = String(config.header_name).toLowerCase();
  if (name === ':method') return req.method;
  if (name === ':path') return req.path;
  return req.headers[name];
}

/** xds StringMatcher: ignore_case applies to exact/prefix/suffix/contains only; safe_regex is RE2's full match. */
function stringMatches(m: Obj, value: string): boolean {
  if ('safe_regex' in m) return new RegExp(`^(?:${String(obj(m.safe_regex, 'safe_regex').regex)})$`, 'u').test(value);
  const fold = (s: string): string => (m.ignore_case === true ? s.toLowerCase() : s);
  const v = fold(value);
  if ('exact' in m) return v === fold(String(m.exact));
  if ('prefix' in m) return v.startsWith(fold(String(m.prefix)));
  if ('suffix' in m) return v.endsWith(fold(String(m.suffix)));
  if ('contains' in m) return v.includes(fold(String(m.contains)));
  throw new Error(`string matcher ${JSON.stringify(m)} is not modelled`);
}

/** A predicate; an absent input matches no value_match (Envoy's StringInputMatcher returns false). */
function predicateMatches(p: Obj, req: Req): boolean {
  if (p.single_predicate !== undefined) {
    const single = obj(p.single_predicate, 'single_predicate');
    if (single.value_match === undefined) throw new Error('custom_match is not modelled');
    const value = readInput(single.input, req);
    return value !== undefined && stringMatches(obj(single.value_match, 'value_match'), value);
  }
  if (p.and_matcher !== undefined) return list(obj(p.and_matcher, 'and').predicate, 'and').every((q) => predicateMatches(q, req));
  if (p.or_matcher !== undefined) return list(obj(p.or_matcher, 'or').predicate, 'or').some((q) => predicateMatches(q, req));
  if (p.not_matcher !== undefined) return !predicateMatches(obj(p.not_matcher, 'not'), req);
  throw new Error(`predicate ${Object.keys(p).join()} is not modelled`);
}

/** The BucketId Envoy builds from a matched action (docs/design/rlqs-envoy.md §6, generateBucketId). */
function bucketOf(onMatch: Obj, req: Req): Outcome {
  if (onMatch.action === undefined) throw new Error('a nested matcher is not modelled');
  const settings = obj(obj(onMatch.action, 'action').typed_config, 'action.typed_config');
  if (settings['@type'] !== BUCKET_SETTINGS) throw new Error(`action ${String(settings['@type'])} is not RateLimitQuotaBucketSettings`);
  const builders = obj(obj(settings.bucket_id_builder, 'bucket_id_builder').bucket_id_builder, 'bucket_id_builder map');
  const id: Record<string, string> = {};
  for (const [key, builder] of Object.entries(builders)) {
    const b = obj(builder, key);
    if ('string_value' in b) id[key] = String(b.string_value);
    else {
      const value = readInput(b.custom_value, req);
      if (value === undefined) return { kind: 'uncounted', key };
      if (value !== '') id[key] = value;
    }
  }
  return { kind: 'bucket', id };
}

function bucketFor(matcher: Obj, req: Req): Outcome {
  if (matcher.matcher_list === undefined) throw new Error('only matcher_list is modelled');
  for (const m of list(obj(matcher.matcher_list, 'matcher_list').matchers, 'matchers')) {
    if (predicateMatches(obj(m.predicate, 'predicate'), req)) return bucketOf(obj(m.on_match, 'on_match'), req);
  }
  return matcher.on_no_match === undefined ? { kind: 'unmatched' } : bucketOf(obj(matcher.on_no_match, 'on_no_match'), req);
}

const request = (method: string, path: string, authorization?: string): Req => ({
  method,
  path,
  headers: authorization === undefined ? {} : { authorization },
});
const bucket = (id: Record<string, string>): Outcome => ({ kind: 'bucket', id });
const UNMATCHED: Outcome = { kind: 'unmatched' };

describe('envoy/envoy-rlqs.yaml: the bucket each request counts in', () => {
  it.each<[string, string, string | undefined, Outcome]>([
    ['GET', '/invoices', TOKEN, bucket({ category: 'read', token: TOKEN })],
    ['GET', '/invoices', undefined, bucket({ category: 'read' })],
    ['GET', '/invoices', '', bucket({ category: 'read' })],
    ['HEAD', '/modules/3', TOKEN, bucket({ category: 'read', token: TOKEN })],
    ['GET', '/MODULES', undefined, bucket({ category: 'read' })],
    ['GET', '/Invoices/7?x=1', TOKEN, bucket({ category: 'read', token: TOKEN })],
    ['GET', '/invoices.json', undefined, bucket({ category: 'read' })],
    ['GET', '/reports/x', TOKEN, bucket({ category: 'reports', token: TOKEN })],
    ['GET', '/reports/x', undefined, bucket({ category: 'reports' })],
    ['HEAD', '/REPORTS', undefined, bucket({ category: 'reports' })],
    ['GET', '/health', TOKEN, UNMATCHED],
    ['GET', '/health', undefined, UNMATCHED],
    ['GET', '/', undefined, UNMATCHED],
    ['OPTIONS', '/modules', TOKEN, UNMATCHED],
    ['DELETE', '/modules/1', TOKEN, bucket({ category: 'write', token: TOKEN })],
    ['DELETE', '/modules/1', undefined, bucket({ category: 'write' })],
    ['POST', '/invoices', TOKEN, bucket({ category: 'write', token: TOKEN })],
    ['PUT', '/health', undefined, bucket({ category: 'write' })],
    ['get', '/modules', TOKEN, bucket({ category: 'write', token: TOKEN })],
    ['Post', '/reports', undefined, bucket({ category: 'write' })],
    ['PROPFIND', '/', '', bucket({ category: 'write' })],
  ])('%s %s (authorization: %j)', (method, path, authorization, expected) => {
    expect(bucketFor(bucketMatchers, request(method, path, authorization))).toEqual(expected);
  });

  it('the model catches the bypass: a token matcher that does not require Authorization lets anonymous requests through uncounted', () => {
    const broken = structuredClone(bucketMatchers);
    const first = list(obj(broken.matcher_list, 'matcher_list').matchers, 'matchers')[0]!;
    const and = obj(obj(first.predicate, 'predicate').and_matcher, 'and_matcher');
    and.predicate = list(and.predicate, 'and').filter((p) => !JSON.stringify(p).includes('"authorization"'));
    expect(bucketFor(broken, request('GET', '/invoices'))).toEqual({ kind: 'uncounted', key: 'token' });
  });
});

/** What envoy.yaml does with a request, as the route model (src/envoy/routes.ts) has it, redirects followed as
 * a client would: the token descriptor, as the bucket it should be, or no bucket when no descriptor is sent. */
function rlsBucket(setup: EnvoyRateLimitSetup, req: Req): Outcome {
  let outcome = envoyOutcome(setup, req);
  for (let hops = 0; outcome.kind === 'redirect' && hops < 3; hops++) outcome = envoyOutcome(setup, { ...req, path: outcome.location });
  const token = outcome.kind === 'routed' ? outcome.descriptors.find((d) => !d.some((e) => e.key === 'remote_address')) : undefined;
  return token ? bucket(Object.fromEntries(token.map((e) => [e.key, e.value]))) : UNMATCHED;
}

/** The same request through envoy-rlqs.yaml: the filter sees :path as the connection manager normalised it. */
function rlqsBucket(setup: EnvoyRateLimitSetup, req: Req): Outcome {
  let path = req.path;
  for (let hops = 0; hops <= 3; hops++) {
    const normalized = normalizeRequestPath(path, setup.connectionManager);
    if (normalized.kind === 'rejected') return UNMATCHED;
    if (!normalized.redirect) return bucketFor(bucketMatchers, { ...req, path: normalized.path });
    path = normalized.path;
  }
  return UNMATCHED;
}

describe('envoy/envoy-rlqs.yaml counts every request as envoy.yaml does', () => {
  it("the listener, its connection manager (path normalisation, addresses), the clusters and the admin are envoy.yaml's", () => {
    const strip = (hcm: Obj): Obj => {
      const { route_config: _r, http_filters: _f, ...rest } = hcm;
      return rest;
    };
    expect(strip(listenerParts(rlqsDoc).hcm)).toEqual(strip(listenerParts(rlsDoc).hcm));
    const resources = (doc: Obj): Obj => obj(doc.static_resources, 'static_resources');
    expect(resources(rlqsDoc).clusters).toEqual(resources(rlsDoc).clusters);
    expect(list(resources(rlqsDoc).listeners, 'listeners')[1]).toEqual(list(resources(rlsDoc).listeners, 'listeners')[1]);
    expect(rlqsDoc.admin).toEqual(rlsDoc.admin);
    expect(quotaFilter.rlqs_server).toEqual({ envoy_grpc: { cluster_name: 'tollgate' } });
    expect(quotaFilter.domain).toBe(obj(listenerParts(rlsDoc).filters[0]!.typed_config, 'ratelimit').domain);
  });

  it("every method × path spelling × credentials gets the bucket of envoy.yaml's token descriptor", () => {
    const setup = loadEnvoyConfig('envoy/envoy.yaml');
    const methods = ['GET', 'HEAD', 'OPTIONS', 'POST', 'PUT', 'PATCH', 'DELETE', 'TRACE', 'PROPFIND', 'get', 'Post'];
    const paths = ['/invoices', '/INVOICES/7', '//invoices', '/./invoices', '/%69nvoices', '/x/../invoices', '/invoices%2F7', '/invoices?x=1'];
    paths.push('/modules', '/MODULES/3', '//modules/./3', '/reports/monthly', '/REPORTS', '/%72eports/x', '/', '/healthz', '/favicon.ico');
    const differ: string[] = [];
    for (const method of methods) {
      for (const path of paths) {
        for (const authorization of [TOKEN, undefined]) {
          const req = request(method, path, authorization);
          const [rls, rlqs] = [rlsBucket(setup, req), rlqsBucket(setup, req)];
          if (JSON.stringify(rls) !== JSON.stringify(rlqs)) differ.push(`${method} ${path} ${authorization ?? '(no token)'}: ${JSON.stringify(rlqs)}`);
        }
      }
    }
    expect(differ).toEqual([]);
  });
});

/** All matchers' actions in the file. */
function actions(): Obj[] {
  return list(obj(bucketMatchers.matcher_list, 'matcher_list').matchers, 'matchers').map((m) =>
    obj(obj(obj(m.on_match, 'on_match').action, 'action').typed_config, 'typed_config'),
  );
}

/** The limits of config/property-api.yaml a bucket meets, read as Tollgate will (docs/design/rlqs-envoy.md, "Bucket
 * to descriptor"): the id's entries in key order, each matched against the descriptor tree, a value-specific
 * descriptor before a key-only one. Undefined when no descriptor matches. */
function limitsFor(id: Record<string, string>): Obj[] | undefined {
  const config = obj(parse(readFileSync('config/property-api.yaml', 'utf8')), 'property-api.yaml');
  let level = list(config.descriptors, 'descriptors');
  let found: Obj | undefined;
  for (const key of Object.keys(id).sort()) {
    const candidates = level.filter((d) => d.key === key);
    found = candidates.find((d) => d.value === id[key]) ?? candidates.find((d) => d.value === undefined);
    if (!found) return undefined;
    level = found.descriptors === undefined ? [] : list(found.descriptors, 'descriptors');
  }
  return found?.rate_limits === undefined ? undefined : list(found.rate_limits, 'rate_limits');
}

describe("envoy/envoy-rlqs.yaml's buckets and settings", () => {
  it('every bucket the file can build meets a rule of config/property-api.yaml: the token rule with a token, the anonymous one without', () => {
    const shapes = actions().map((a) => {
      const builders = obj(obj(a.bucket_id_builder, 'bucket_id_builder').bucket_id_builder, 'map');
      return Object.fromEntries(Object.entries(builders).map(([k, b]) => [k, 'string_value' in obj(b, k) ? String(obj(b, k).string_value) : TOKEN]));
    });
    expect(shapes.map((s) => [s.category, 'token' in s])).toEqual([
      ['read', true],
      ['read', false],
      ['reports', true],
      ['reports', false],
      ['write', true],
      ['write', false],
    ]);
    for (const id of shapes) {
      const names = limitsFor(id)?.map((l) => l.name);
      const anonymous = id.token === undefined ? '-anonymous' : '';
      expect(names, JSON.stringify(id)).toEqual([`${id.category}${anonymous}-per-second`, `${id.category}${anonymous}-per-hour`]);
    }
  });

  it('every action has the same settings: 429 with Retry-After, allowed until assigned, back to that at expiry', () => {
    for (const a of actions()) {
      expect(a.reporting_interval).toBe('5s');
      expect(a.deny_response_settings).toEqual({
        http_status: { code: 'TooManyRequests' },
        response_headers_to_add: [{ header: { key: 'retry-after', value: '1' }, append_action: 'OVERWRITE_IF_EXISTS_OR_ADD' }],
      });
      expect(a.no_assignment_behavior).toEqual({ fallback_rate_limit: { blanket_rule: 'ALLOW_ALL' } });
      // No fallback: at expiry the bucket returns to no_assignment_behavior (docs/design/rlqs-envoy.md §3).
      expect(a.expired_assignment_behavior).toBeUndefined();
    }
  });
});
