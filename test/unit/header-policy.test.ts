import { describe, expect, it } from 'vitest';
import { DomainOwners } from '../../src/config/domain-owners.js';
import { compileSources, configLimits } from '../../src/config/load.js';
import { RLS_CONFIG_TYPE_URL, xdsSources } from '../../src/config/rls-conf.js';
import type { Decision } from '../../src/limiter/limiter.js';
import { DEFAULT_RESPONSES, type ResponseSettings } from '../../src/response/header-policy.js';
import { toWireResponse } from '../../src/response/response.js';
import { parseServeArgs } from '../../src/settings/settings.js';
import { encodeConfig } from '../helpers/ads-server.js';
import { compileYaml, type Harness, harness, T0 } from '../helpers/decide.js';
import { egConfigs, LISTENER_DOMAIN, userRequest } from '../helpers/envoy-gateway.js';

// Which headers and 429 body an answer carries (src/response/header-policy.ts), from real decisions: Envoy
// Gateway's configs through the xDS conversion, and file configs with and without `response_headers:`.

const egConfig = () =>
  compileSources(
    xdsSources(
      egConfigs().map((c) => ({ typeUrl: RLS_CONFIG_TYPE_URL, value: encodeConfig(c as never) })),
      configLimits(4 << 20, false),
    ),
  );
const FILES = compileYaml(
  'domain: plain\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 3}\n' +
    '  - key: b\n    rate_limit: {unit: hour, requests_per_unit: 5}\n',
  'domain: drafted\nresponse_headers: draft\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 3, name: a-per-minute}\n',
);

const settings = (s: Partial<ResponseSettings>): ResponseSettings => ({ ...DEFAULT_RESPONSES, ...s });
const names = (d: Decision, s: ResponseSettings): string[] => toWireResponse(d, s).response_headers_to_add.map((h) => h.key);
const headers = (d: Decision, s: ResponseSettings): Record<string, string> =>
  Object.fromEntries(toWireResponse(d, s).response_headers_to_add.map((h) => [h.key, h.value]));

async function overLimit(h: Harness, domain: string, descriptors: Record<string, string>[], n: number): Promise<Decision> {
  let d: Decision | undefined;
  for (let i = 0; i < n; i++) d = await h.decide(domain, descriptors);
  return d!;
}

describe('which source wins', () => {
  it("a config from xDS: no headers and no body, OK or 429, as envoyproxy/ratelimit's defaults answer", async () => {
    const h = harness(egConfig());
    const xds = settings({ source: 'xds' });
    const user = userRequest('u1').descriptors[0]!;
    const ok = await h.decide(LISTENER_DOMAIN, [user]);
    expect(toWireResponse(ok, xds).response_headers_to_add).toEqual([]);
    for (let i = 0; i < 2; i++) await h.decide(LISTENER_DOMAIN, [user]);
    const over = toWireResponse(await h.decide(LISTENER_DOMAIN, [user]), xds);
    expect(over.overall_code).toBe(2);
    expect(over.response_headers_to_add).toEqual([]);
    expect(over.raw_body).toBeUndefined();
    // The status names no limit: Envoy Gateway's limits have no name, and none is made up.
    expect(over.statuses[0]!.current_limit).toEqual({ name: '', requests_per_unit: 3, unit: 2 });
  });

  it('LIMIT_REQUEST_HEADERS_ENABLED: the same three headers for the upstream, OK and 429 alike, named as set', async () => {
    const s = parseServeArgs([], { CONFIG_TYPE: 'GRPC_XDS_SOTW', LIMIT_REQUEST_HEADERS_ENABLED: 'true', LIMIT_REQUEST_RESET_HEADER: 'X-Reset-In' }).responses;
    const h = harness(egConfig());
    const user = userRequest('u9').descriptors[0]!;
    const ok = toWireResponse(await h.decide(LISTENER_DOMAIN, [user]), s);
    expect(ok.response_headers_to_add).toEqual([]); // the client's headers as before: none from xDS
    expect(ok.request_headers_to_add).toEqual([
      { key: 'RateLimit-Limit', value: '3' },
      { key: 'RateLimit-Remaining', value: '2' },
      { key: 'X-Reset-In', value: String(ok.statuses[0]!.duration_until_reset!.seconds + (ok.statuses[0]!.duration_until_reset!.nanos > 0 ? 1 : 0)) },
    ]);
    for (let i = 0; i < 2; i++) await h.decide(LISTENER_DOMAIN, [user]);
    const over = toWireResponse(await h.decide(LISTENER_DOMAIN, [user]), s);
    expect(over.request_headers_to_add.slice(0, 2)).toEqual([
      { key: 'RateLimit-Limit', value: '3' },
      { key: 'RateLimit-Remaining', value: '0' },
    ]);
    expect(toWireResponse(await h.decide(LISTENER_DOMAIN, [user]), settings({})).request_headers_to_add).toEqual([]); // off by default
  });

  it('xDS beside a config directory: a domain from xDS answers as xDS alone would, one from a file as files do', async () => {
    const eg = egConfig();
    const marked = new DomainOwners([{ label: 'eg', kind: 'xds' }]).set(0, eg).config;
    const user = userRequest('u1').descriptors[0]!;
    const mixed = settings({ source: 'file' }); // what CONFIG_TYPE=GRPC_XDS_SOTW,FILE gives
    expect(toWireResponse(await harness(marked).decide(LISTENER_DOMAIN, [user]), mixed).response_headers_to_add).toEqual([]);
    // The same domain, not marked as from xDS: Tollgate's default headers.
    expect(names(await harness(eg).decide(LISTENER_DOMAIN, [user]), mixed)).toContain('X-RateLimit-Limit');
  });

  it("a file config that does not say: Tollgate's X-RateLimit-*, Retry-After and problem body (as before)", async () => {
    const h = harness(FILES);
    const d = await overLimit(h, 'plain', [{ a: 'x' }], 4);
    const r = toWireResponse(d, DEFAULT_RESPONSES);
    expect(r.response_headers_to_add.map((x) => x.key)).toEqual([
      'X-RateLimit-Limit',
      'X-RateLimit-Remaining',
      'X-RateLimit-Reset',
      'Retry-After',
      'content-type',
    ]);
    expect(JSON.parse(r.raw_body!.toString())).toMatchObject({ status: 429, title: 'Quota Exceeded' });
  });

  it("LIMIT_RESPONSE_HEADERS_ENABLED=true: envoyproxy/ratelimit's three headers, for xDS and unsaying files alike; a file's own key still wins", async () => {
    const on = { limitHeaders: true };
    expect(names(await harness(egConfig()).decide(LISTENER_DOMAIN, [userRequest('u').descriptors[0]!]), settings({ ...on, source: 'xds' }))).toEqual([
      'RateLimit-Limit',
      'RateLimit-Remaining',
      'RateLimit-Reset',
    ]);
    const h = harness(FILES);
    const over = await overLimit(h, 'plain', [{ a: 'x' }], 4);
    expect(names(over, settings(on))).toEqual(['RateLimit-Limit', 'RateLimit-Remaining', 'RateLimit-Reset']);
    expect(toWireResponse(over, settings(on)).raw_body).toBeUndefined();
    expect(names(await h.decide('drafted', [{ a: 'x' }]), settings(on))).toEqual(['RateLimit-Policy', 'RateLimit']);
  });

  it('LIMIT_RESPONSE_HEADERS_ENABLED=false, or RESPONSE_HEADERS=off: none, whatever the file says; RESPONSE_HEADERS=on: for xDS too', async () => {
    const h = harness(FILES);
    expect(names(await h.decide('plain', [{ a: 'x' }]), settings({ limitHeaders: false }))).toEqual([]);
    expect(names(await h.decide('drafted', [{ a: 'x' }]), settings({ limitHeaders: false }))).toEqual(['RateLimit-Policy', 'RateLimit']);
    expect(names(await h.decide('drafted', [{ a: 'x' }]), settings({ tollgate: 'off' }))).toEqual([]);
    expect(names(await h.decide('drafted', [{ a: 'x' }]), settings({ tollgate: 'off', limitHeaders: true }))).toEqual([
      'RateLimit-Limit',
      'RateLimit-Remaining',
      'RateLimit-Reset',
    ]);
    const eg = harness(egConfig());
    const d = await eg.decide(LISTENER_DOMAIN, [userRequest('u').descriptors[0]!]);
    expect(names(d, settings({ tollgate: 'on', source: 'xds' }))).toEqual(['X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset']);
  });
});

describe("envoyproxy/ratelimit's headers (src/service/ratelimit.go)", () => {
  const on = settings({ limitHeaders: true, names: { limit: 'X-RateLimit-Limit', remaining: 'X-RateLimit-Remaining', reset: 'X-RateLimit-Reset' } });

  it('the descriptor with the fewest remaining; reset in seconds to go, unit - now % unit, as utils.CalculateReset', async () => {
    const h = harness(FILES);
    h.clock.set(T0 + 61_400); // 1.4 s into a minute, 61.4 s into an hour
    await h.decide('plain', [{ a: 'x' }]);
    const d = await h.decide('plain', [{ b: 'y' }, { a: 'x' }]); // b: 4 of 5 left; a: 1 of 3 left
    const now = Math.floor((T0 + 61_400) / 1000);
    expect(headers(d, on)).toEqual({ 'X-RateLimit-Limit': '3', 'X-RateLimit-Remaining': '1', 'X-RateLimit-Reset': String(60 - (now % 60)) });
    h.clock.set(T0 + 120_000); // on the boundary: a whole unit to go, as there
    expect(headers(await h.decide('plain', [{ a: 'z' }]), on)['X-RateLimit-Reset']).toBe('60');
  });

  it('a descriptor over its limit wins though another has as few left; an unlimited one never counts', async () => {
    const h = harness(
      compileYaml(
        'domain: q\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 1}\n' +
          '  - key: b\n    shadow_mode: true\n    rate_limit: {unit: hour, requests_per_unit: 1}\n  - key: u\n    rate_limit: {unlimited: true}\n',
      ),
    );
    await h.decide('q', [{ a: 'x' }, { b: 'y' }]);
    // b, in shadow mode, is over but says OK with 0 left, and comes first; a is over. The over one is reported.
    const d = await h.decide('q', [{ b: 'y' }, { a: 'x' }, { u: 'z' }]);
    expect(toWireResponse(d).statuses.map((x) => [x.code, x.limit_remaining])).toEqual([
      [1, 0],
      [2, 0],
      [1, 4294967295],
    ]);
    expect(headers(d, on)).toMatchObject({ 'X-RateLimit-Limit': '1', 'X-RateLimit-Remaining': '0' });
    expect(Number(headers(d, on)['X-RateLimit-Reset'])).toBeLessThanOrEqual(60); // a's minute, not b's hour
    expect(headers(await h.decide('q', [{ u: 'z' }]), on)).toEqual({});
  });
});

describe('settings', () => {
  it('RESPONSE_HEADERS, LIMIT_RESPONSE_HEADERS_ENABLED and the names, read and checked', () => {
    expect(parseServeArgs([], {}).responses).toEqual({ ...DEFAULT_RESPONSES, source: 'file' });
    expect(parseServeArgs([], { CONFIG_TYPE: 'GRPC_XDS_SOTW' }).responses.source).toBe('xds');
    expect(parseServeArgs([], { LIMIT_RESPONSE_HEADERS_ENABLED: 'TRUE', LIMIT_RESET_HEADER: 'X-Reset' }).responses).toMatchObject({
      limitHeaders: true,
      names: { reset: 'X-Reset' },
    });
    expect(parseServeArgs(['--response-headers', 'OFF'], {}).responses.tollgate).toBe('off');
    expect(() => parseServeArgs([], { RESPONSE_HEADERS: 'sometimes' })).toThrow('RESPONSE_HEADERS must be auto, on or off (got "sometimes")');
    expect(() => parseServeArgs([], { RESPONSE_HEADERS: 'on', LIMIT_RESPONSE_HEADERS_ENABLED: 'true' })).toThrow(/both add rate-limit headers/);
    expect(() => parseServeArgs([], { LIMIT_LIMIT_HEADER: 'Rate Limit' })).toThrow('LIMIT_LIMIT_HEADER must be an HTTP header name (got "Rate Limit")');
  });

  it("USE_PROMETHEUS's address as Go reads it: :19001 is every address; a path of its own", () => {
    const p = (env: NodeJS.ProcessEnv) => parseServeArgs([], { USE_PROMETHEUS: 'true', ...env }).prometheus;
    expect(parseServeArgs([], { PROMETHEUS_ADDR: ':19001' }).prometheus).toBeUndefined();
    expect(p({})).toMatchObject({ host: '0.0.0.0', port: 9090, path: '/metrics' });
    expect(p({ PROMETHEUS_ADDR: ':19001' })).toMatchObject({ host: '0.0.0.0', port: 19001 });
    expect(p({ PROMETHEUS_ADDR: '127.0.0.1:9100', PROMETHEUS_PATH: '/stats' })).toMatchObject({ host: '127.0.0.1', port: 9100, path: '/stats' });
    expect(p({ PROMETHEUS_ADDR: '[::1]:9100' })).toMatchObject({ host: '::1', port: 9100 });
    for (const bad of ['19001', 'host', ':99999', 'a:b:1']) expect(() => p({ PROMETHEUS_ADDR: bad }), bad).toThrow(/^PROMETHEUS_ADDR must be \[host\]:port/);
    expect(() => p({ PROMETHEUS_PATH: 'metrics' })).toThrow(/^PROMETHEUS_PATH must be a path starting with \//);
  });
});
