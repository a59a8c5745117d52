import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import type { EntryLike } from '../../src/config/match.js';
import {
  canonicalizePath,
  DEFAULT_PEER,
  EnvoyConfigError,
  type EnvoyOutcome,
  type EnvoyRateLimitSetup,
  envoyOutcome,
  type HttpRequestLike,
  loadEnvoyConfig,
  normalizeRequestPath,
  PINNED_ENVOY_VERSION,
} from '../../src/envoy/routes.js';

// Replays requests through src/envoy/routes.ts, the model of what Envoy does with envoy.yaml: normalisation,
// case-insensitive route matching in order, internal/external, and the rate-limit actions. The same table
// runs against the file shipped before issue 13, to show the test would have caught its bypasses.

const current = loadEnvoyConfig('envoy/envoy.yaml');
const before = loadEnvoyConfig('test/fixtures/envoy/before-issue-13.yaml');
/** The Envoy the old manifests ran (envoyproxy/envoy:v1.31-latest): RFC 1918 was internal by default. */
const BEFORE_VERSION = '1.31';
const TOKEN = 'Bearer abc';

type Category = 'read' | 'reports' | 'write' | null;

/** Spellings of a limited path that reach the same resource in the app (or a 404 there, which is fine). */
const READ_PATHS = [
  '/invoices',
  '/invoices/7',
  '/INVOICES',
  '/Invoices/7',
  '//invoices',
  '///invoices//7',
  '/./invoices',
  '/%69nvoices',
  '/inv%6Fices/7',
  '/x/../invoices',
  '/%2e/invoices',
  '/a/%2E%2E/invoices',
  '/invoices/',
  '/invoices?x=1',
  '/invoices;v=1',
  '/invoices.json',
  '/invoices#top',
  '/invoices%2F7',
  '/%5Cinvoices',
  '/modules',
  '/MODULES/3',
  '/%6Dodules',
  '//modules/./3',
];
const REPORT_PATHS = ['/reports/monthly', '/REPORTS/monthly', '//reports//monthly', '/./reports/x', '/%72eports/monthly', '/reports%2Fmonthly', '/reports'];
const OTHER_PATHS = ['/', '/healthz', '/favicon.ico'];
const READ_METHODS = ['GET', 'HEAD'];
const WRITE_METHODS = ['POST', 'PUT', 'PATCH', 'DELETE', 'TRACE', 'PROPFIND', 'LINK', 'get', 'Post'];

interface Variant {
  label: string;
  headers: Record<string, string>;
  remoteAddress?: string;
}

/** With and without credentials, with a forged X-Forwarded-For and x-envoy-internal, from the pod network
 * and from the internet. */
const VARIANTS: Variant[] = [
  { label: '', headers: {} },
  { label: 'x-forwarded-for: 10.0.0.1', headers: { 'x-forwarded-for': '10.0.0.1' } },
  { label: 'x-envoy-internal: true', headers: { 'x-envoy-internal': 'true' } },
  { label: 'from 203.0.113.9, x-forwarded-for: 127.0.0.1', headers: { 'x-forwarded-for': '127.0.0.1' }, remoteAddress: '203.0.113.9' },
];

/** What happens end to end: Envoy's own answers are final, a redirect is followed as a client would. */
function resolve(setup: EnvoyRateLimitSetup, req: HttpRequestLike, version: string): EnvoyOutcome {
  let outcome = envoyOutcome(setup, req, { envoyVersion: version });
  for (let hops = 0; outcome.kind === 'redirect' && hops < 3; hops++) {
    outcome = envoyOutcome(setup, { ...req, path: outcome.location }, { envoyVersion: version });
  }
  return outcome;
}

/** The token descriptor, then the backstop per client address (issue 22): its value is the peer, since
 * envoy.yaml trusts no XFF hop, whatever X-Forwarded-For a client sends. */
function expected(category: Category, withToken: boolean, peer = DEFAULT_PEER): EntryLike[][] {
  if (!category) return [];
  return [
    [{ key: 'category', value: category }, ...(withToken ? [{ key: 'token', value: TOKEN }] : [])],
    [
      { key: 'category', value: category },
      { key: 'remote_address', value: peer },
    ],
  ];
}

/** Every request of the table whose descriptors differ from its category's; empty when nothing escapes. */
function mismatches(setup: EnvoyRateLimitSetup, version: string): string[] {
  const cases: [string[], string[], Category][] = [
    [READ_METHODS, READ_PATHS, 'read'],
    [READ_METHODS, REPORT_PATHS, 'reports'],
    [READ_METHODS, OTHER_PATHS, null],
    [['OPTIONS'], [...READ_PATHS, ...REPORT_PATHS], null],
    [WRITE_METHODS, [...READ_PATHS, ...REPORT_PATHS, ...OTHER_PATHS], 'write'],
  ];
  const out: string[] = [];
  for (const [methods, paths, category] of cases) {
    for (const method of methods) {
      for (const path of paths) {
        for (const v of VARIANTS) {
          for (const withToken of [true, false]) {
            const headers = { ...v.headers, ...(withToken ? { authorization: TOKEN } : {}) };
            const outcome = resolve(setup, { method, path, headers, remoteAddress: v.remoteAddress }, version);
            const got = outcome.kind === 'routed' ? outcome.descriptors : [];
            if (JSON.stringify(got) !== JSON.stringify(expected(category, withToken, v.remoteAddress))) {
              out.push(`${method} ${path}${v.label ? ` (${v.label})` : ''}${withToken ? '' : ' (no token)'}: ${JSON.stringify(got)}`);
            }
          }
        }
      }
    }
  }
  return out;
}

describe('envoy/envoy.yaml: no spelling of a request escapes its limit', () => {
  it('every method × path spelling × credentials × forged header gets its category', () => {
    expect(mismatches(current, PINNED_ENVOY_VERSION)).toEqual([]);
  });

  it('holds on an Envoy older than 1.33 too: internal_address_config does not rely on the default', () => {
    expect(mismatches(current, BEFORE_VERSION)).toEqual([]);
  });

  it('no client header makes a request internal; only a peer in this pod is', () => {
    const cm = current.connectionManager;
    expect(cm.useRemoteAddress).toBe(true);
    expect(current.requestType).toBe('both');
    const outcome = (headers: Record<string, string>, remoteAddress?: string): EnvoyOutcome =>
      envoyOutcome(current, { method: 'GET', path: '/invoices', headers, remoteAddress });
    const forgedHeaders: Record<string, string>[] = [{ 'x-forwarded-for': '10.0.0.1' }, { 'x-forwarded-for': '127.0.0.1' }, { 'x-envoy-internal': 'true' }];
    for (const forged of forgedHeaders) {
      expect(outcome(forged)).toMatchObject({ kind: 'routed', internal: false, filterApplies: true });
    }
    expect(outcome({}, DEFAULT_PEER)).toMatchObject({ internal: false });
    expect(outcome({}, '192.168.1.5')).toMatchObject({ internal: false });
    // A process in the pod is internal, and still limited.
    expect(outcome({}, '127.0.0.1')).toMatchObject({ internal: true, filterApplies: true, descriptors: expected('read', false, '127.0.0.1') });
    // A forged X-Forwarded-For changes nobody's address: the backstop counts the peer.
    expect(outcome({ 'x-forwarded-for': '198.51.100.7' }, '203.0.113.9')).toMatchObject({ descriptors: expected('read', false, '203.0.113.9') });
  });

  it('remote_address behind one trusted proxy: the XFF entry that proxy added, else the peer (as Envoy keeps it)', () => {
    const behindOne: EnvoyRateLimitSetup = { ...current, connectionManager: { ...current.connectionManager, xffNumTrustedHops: 1 } };
    const address = (headers: Record<string, string>): unknown =>
      (envoyOutcome(behindOne, { method: 'GET', path: '/invoices', headers, remoteAddress: '10.1.2.3' }) as { descriptors: { value: string }[][] })
        .descriptors[1]![1]!.value;
    expect(address({ 'x-forwarded-for': '1.1.1.1, 198.51.100.7' })).toBe('198.51.100.7');
    expect(address({})).toBe('10.1.2.3');
    expect(address({ 'x-forwarded-for': 'not-an-address' })).toBe('10.1.2.3');
  });

  it('Envoy answers escaped slashes with a redirect to the unescaped path, which is limited', () => {
    expect(envoyOutcome(current, { method: 'GET', path: '/invoices%2F7?x=%2F', headers: {} })).toEqual({ kind: 'redirect', location: '/invoices/7?x=%2F' });
    expect(envoyOutcome(current, { method: 'GET', path: '/%5Cinvoices', headers: {} })).toEqual({ kind: 'redirect', location: '/invoices' });
    expect(envoyOutcome(current, { method: 'GET', path: '/a%00b', headers: {} })).toMatchObject({ kind: 'rejected', status: 400 });
    expect(envoyOutcome(current, { method: 'CONNECT', path: '/', headers: {} })).toMatchObject({ kind: 'no-route' });
  });
});

describe('the envoy.yaml shipped before issue 13 fails the same table', () => {
  const escaped = mismatches(before, BEFORE_VERSION);

  it.each([
    ['a forged X-Forwarded-For turns the filter off', 'GET /invoices (x-forwarded-for: 10.0.0.1): []'],
    ['upper case', 'GET /INVOICES: []'],
    ['double slash', 'GET //invoices: []'],
    ['dot segment', 'GET /./invoices: []'],
    ['escaped unreserved character', 'GET /%69nvoices: []'],
    ['HEAD', 'HEAD /invoices: []'],
    ['PATCH', 'PATCH /invoices/7: []'],
    ['unknown method', 'PROPFIND /invoices: []'],
  ])('%s', (_, line) => {
    expect(escaped).toContain(line);
  });

  it('on the Envoy it ran, a forged XFF made every request internal', () => {
    const outcome = envoyOutcome(before, { method: 'POST', path: '/invoices', headers: { 'x-forwarded-for': '10.0.0.1' } }, { envoyVersion: BEFORE_VERSION });
    expect(outcome).toMatchObject({ kind: 'routed', internal: true, filterApplies: false, descriptors: [] });
  });
});

describe('path normalisation follows Envoy', () => {
  // Envoy's own vectors for PathUtil::canonicalPath (test/common/http/path_utility_test.cc).
  it.each([
    ['/xyz', '/xyz'],
    ['/x/y/z', '/x/y/z'],
    ['/a/b/../c', '/a/c'],
    ['/a/b/./c', '/a/b/c'],
    ['a/b/../c', '/a/c'],
    ['/a/b/../../../../c', '/c'],
    ['/a/..\\c', '/c'],
    ['/%c0%af', '/%c0%af'],
    ['/%5c%25', '/%5c%25'],
    ['/a/b/%2E%2E/c', '/a/c'],
    ['/A/B/C', '/A/B/C'],
    ['/a/b/%2e%2e/c', '/a/c'],
    ['/a/%2F%2f/c', '/a/%2F%2f/c'],
    // Chromium's table: unreserved escapes decoded, others kept, unsafe characters escaped.
    ['/%69nvoices', '/invoices'],
    ['/%7E%2D%5F%30', '/~-_0'],
    ['/a b"<>', '/a%20b%22%3C%3E'],
    ['/caf\u00e9', '/caf%C3%A9'],
    ['/%zz%', '/%zz%'],
  ])('canonical %s → %s', (input, output) => {
    expect(canonicalizePath(input)).toBe(output);
  });

  it.each(['/xyz/.%00../abc', '/xyz/%00.%00./abc', '/xyz/AAAAA%%0000/abc'])('%s is rejected (Envoy: 400)', (input) => {
    expect(canonicalizePath(input)).toBeUndefined();
  });

  it('merges slashes in the path only, after normalising, and leaves the query alone', () => {
    const cm = { ...current.connectionManager, escapedSlashes: 'KEEP_UNCHANGED' as const };
    for (const [input, output] of [
      ['//a/b/c', '/a/b/c'],
      ['/a//b/c/', '/a/b/c/'],
      ['/a//b?a=///c', '/a/b?a=///c'],
      ['//a/?b', '/a/?b'],
      ['/a/%2F/b', '/a/%2F/b'],
    ]) {
      expect(normalizeRequestPath(input!, cm)).toEqual({ kind: 'ok', path: output, redirect: false });
    }
  });
});

describe('docs/security.md "Methods and categories" is the table the model computes', () => {
  const doc = readFileSync('docs/security.md', 'utf8');
  const lines = doc.slice(doc.indexOf('### Methods and categories')).split('\n');
  const start = lines.findIndex((l) => l.startsWith('|'));
  const end = lines.findIndex((l, i) => i > start && !l.startsWith('|'));
  // The rows after the header and its |---| line.
  const rows = start === -1 ? [] : lines.slice(start + 2, end);
  const ticked = (cell: string): string[] => [...cell.matchAll(/`([^`]+)`/g)].map((m) => m[1]!);
  const table = rows.map((r) =>
    r
      .split('|')
      .slice(1, -1)
      .map((c) => c.trim()),
  );

  it('lists every method the issue names, and CONNECT', () => {
    const methods = table.flatMap((cells) => ticked(cells[0]!));
    for (const m of ['GET', 'HEAD', 'OPTIONS', 'POST', 'PUT', 'PATCH', 'DELETE', 'TRACE', 'CONNECT']) expect(methods).toContain(m);
  });

  it.each(table.map((cells) => [cells.join(' | '), cells] as const))('%s', (_, cells) => {
    const [methodCell, pathCell, categoryCell] = cells as [string, string, string];
    const paths = ticked(pathCell).length > 0 ? ticked(pathCell) : ['/'];
    const category = ticked(categoryCell)[0] as Category | undefined;
    for (const method of ticked(methodCell)) {
      for (const path of paths) {
        const outcome = resolve(current, { method, path, headers: { authorization: TOKEN } }, PINNED_ENVOY_VERSION);
        if (/Envoy answers/.test(categoryCell)) expect(outcome.kind, `${method} ${path}`).not.toBe('routed');
        else expect(outcome.kind === 'routed' ? outcome.descriptors : 'not routed', `${method} ${path}`).toEqual(expected(category ?? null, true));
      }
    }
  });
});

describe('an envoy.yaml missing what Tollgate reads', () => {
  it('is an EnvoyConfigError naming the file and the path, not a TypeError (a cluster without load_assignment)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'tollgate-envoy-'));
    const text = readFileSync('envoy/envoy.yaml', 'utf8');
    const doc = parse(text) as { static_resources: { clusters: Record<string, unknown>[] } };
    const rls = doc.static_resources.clusters.find((c) => c.name === loadEnvoyConfig('envoy/envoy.yaml').rls.cluster)!;
    delete rls.load_assignment;
    writeFileSync(join(dir, 'envoy.yaml'), stringify(doc));
    expect(() => loadEnvoyConfig(join(dir, 'envoy.yaml'))).toThrow(EnvoyConfigError);
    expect(() => loadEnvoyConfig(join(dir, 'envoy.yaml'))).toThrow(/envoy\.yaml: cluster "[^"]+"\.load_assignment is missing/);
    rls.load_assignment = { endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: '127.0.0.1' } } } }] }] };
    writeFileSync(join(dir, 'envoy.yaml'), stringify(doc));
    expect(() => loadEnvoyConfig(join(dir, 'envoy.yaml'))).toThrow(/socket_address\.port_value is missing/);
  });
});
