import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { configDir, HOUR_START, header, type RlsRequest, repeat, startTestService, type TestService } from '../helpers/service.js';

const RULES = `
domain: rules
descriptors:
  - key: client
    rate_limits:
      - {unit: second, requests_per_unit: 3, name: client-second}
      - {unit: minute, requests_per_unit: 5, name: client-minute}
  - key: path
    value: /admin*
    rate_limit: {unit: second, requests_per_unit: 1, name: admin-prefix}
  - key: path
    value: /admin/special*
    rate_limit: {unit: second, requests_per_unit: 4, name: admin-special-prefix}
  - key: path
    value: /admin/exact
    rate_limit: {unit: second, requests_per_unit: 2, name: admin-exact}
  - key: path
    rate_limit: {unit: second, requests_per_unit: 6, name: any-path}
  - key: tenant
    value: acme
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 2, name: acme-user}
      - key: user
        value: root
        rate_limit: {unlimited: true}
  - key: generic
    rate_limit: {unit: second, requests_per_unit: 10, name: generic}
  - key: vip
    rate_limit:
      unit: second
      requests_per_unit: 20
      name: vip
      replaces: [{name: generic}]
  - key: trial
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1, name: trial}
  - key: slide
    algorithm: sliding_window
    rate_limit: {unit: minute, requests_per_unit: 10, name: slide}
  - key: blocked
    rate_limit: {unit: hour, requests_per_unit: 0, name: blocked}
`;

const DRAFT = `
domain: draft
response_headers: draft
descriptors:
  - key: k
    rate_limits:
      - {unit: second, requests_per_unit: 2, name: k-second}
      - {unit: hour, requests_per_unit: 100, name: k-hour}
`;

const CUSTOM = `
domain: custom
response_headers:
  limit: X-Quota-Limit
  remaining: X-Quota-Remaining
  reset: X-Quota-Reset
  window: tightest
descriptors:
  - key: k
    rate_limits:
      - {unit: second, requests_per_unit: 2}
      - {unit: hour, requests_per_unit: 100}
`;

const one = (domain: string, ...pairs: [string, string][]): RlsRequest => ({
  domain,
  descriptors: [{ entries: pairs.map(([key, value]) => ({ key, value })) }],
});
const codes = (rs: { overall_code: string }[]): string[] => rs.map((r) => r.overall_code);

describe('descriptor rules over gRPC', () => {
  let t: TestService;
  beforeAll(async () => {
    t = await startTestService({ configDir: configDir({ 'rules.yaml': RULES, 'draft.yml': DRAFT, 'custom.yaml': CUSTOM }) });
  });
  afterAll(async () => t.close());
  beforeEach(() => t.clock.set(HOUR_START));

  it('checks every window of a descriptor together', async () => {
    const req = one('rules', ['client', 'a']);
    expect(codes(await repeat(t.rls, req, 4))).toEqual(['OK', 'OK', 'OK', 'OVER_LIMIT']);
    t.clock.advance(1000);
    // 3 counted in the minute; 2 more fit, then the minute window blocks although the second has room.
    const next = await repeat(t.rls, req, 3);
    expect(codes(next)).toEqual(['OK', 'OK', 'OVER_LIMIT']);
    expect(next[2]!.statuses[0]!.current_limit?.name).toBe('client-minute');
    expect(header(next[2]!, 'Retry-After')).toBe('59');
  });

  it('matches exact values before wildcards, the first wildcard in file order, then the default key', async () => {
    const name = async (path: string): Promise<string | undefined> => (await t.rls.call(one('rules', ['path', path]))).statuses[0]!.current_limit?.name;
    expect(await name('/admin/exact')).toBe('admin-exact');
    // /admin* is listed before /admin/special*: the first match in file order wins, as in envoyproxy/ratelimit.
    expect(await name('/admin/special/x')).toBe('admin-prefix');
    expect(await name('/admin/users')).toBe('admin-prefix');
    expect(await name('/public')).toBe('any-path');
  });

  it('gives every value matched by a wildcard its own counter', async () => {
    expect(codes(await repeat(t.rls, one('rules', ['path', '/admin/a']), 2))).toEqual(['OK', 'OVER_LIMIT']);
    expect(codes(await repeat(t.rls, one('rules', ['path', '/admin/b']), 2))).toEqual(['OK', 'OVER_LIMIT']);
  });

  it('matches nested descriptors, and unlimited nodes never limit', async () => {
    const user = one('rules', ['tenant', 'acme'], ['user', 'bob']);
    expect(codes(await repeat(t.rls, user, 3))).toEqual(['OK', 'OK', 'OVER_LIMIT']);
    const root = await repeat(t.rls, one('rules', ['tenant', 'acme'], ['user', 'root']), 50);
    expect(new Set(codes(root))).toEqual(new Set(['OK']));
    expect(root[0]!.statuses[0]!.current_limit).toBeNull();
    // No rule for the tenant alone, nor for a deeper path than the config has.
    expect((await t.rls.call(one('rules', ['tenant', 'acme']))).statuses[0]!.current_limit).toBeNull();
    expect((await t.rls.call(one('rules', ['tenant', 'other'], ['user', 'bob']))).statuses[0]!.current_limit).toBeNull();
  });

  it('a limit named in replaces is dropped when the replacing one matches', async () => {
    const both: RlsRequest = {
      domain: 'rules',
      descriptors: [{ entries: [{ key: 'generic', value: 'x' }] }, { entries: [{ key: 'vip', value: 'x' }] }],
    };
    const rs = await repeat(t.rls, both, 21);
    expect(codes(rs).filter((c) => c === 'OK')).toHaveLength(20);
    expect(rs[0]!.statuses[0]!.current_limit).toBeNull(); // generic replaced
    expect(rs[0]!.statuses[1]!.current_limit?.name).toBe('vip');
    // Alone, generic still applies its own 10/s.
    t.clock.advance(1000);
    expect(codes(await repeat(t.rls, one('rules', ['generic', 'x']), 11)).filter((c) => c === 'OK')).toHaveLength(10);
  });

  it("a shadow rule's status says OK even when over (as envoyproxy/ratelimit answers), and admits the request", async () => {
    const rs = await repeat(t.rls, one('rules', ['trial', 'x']), 3);
    expect(codes(rs)).toEqual(['OK', 'OK', 'OK']);
    expect(rs.map((r) => r.statuses[0]!.code)).toEqual(['OK', 'OK', 'OK']);
    expect(rs.map((r) => r.statuses[0]!.limit_remaining)).toEqual([0, 0, 0]);
    expect(header(rs[2]!, 'Retry-After')).toBeUndefined();
  });

  it('a shadow descriptor never blocks, an enforced one blocks the whole request and nothing is counted', async () => {
    const req: RlsRequest = {
      domain: 'rules',
      descriptors: [{ entries: [{ key: 'trial', value: 'y' }] }, { entries: [{ key: 'client', value: 'y' }] }],
    };
    const rs = await repeat(t.rls, req, 4);
    expect(codes(rs)).toEqual(['OK', 'OK', 'OK', 'OVER_LIMIT']);
    // The 4th was rejected by client-second: the minute counter did not move (3 of 5 used).
    t.clock.advance(1000);
    const after = await t.rls.call(one('rules', ['client', 'y']));
    expect(after.statuses[0]!.current_limit?.name).toBe('client-minute');
    expect(after.statuses[0]!.limit_remaining).toBe(1);
  });

  it('a request rejected by one descriptor consumes nothing from the others', async () => {
    const req: RlsRequest = {
      domain: 'rules',
      descriptors: [{ entries: [{ key: 'generic', value: 'z' }] }, { entries: [{ key: 'blocked', value: 'z' }] }],
    };
    expect(codes(await repeat(t.rls, req, 5))).toEqual(Array(5).fill('OVER_LIMIT'));
    const alone = await t.rls.call(one('rules', ['generic', 'z']));
    expect(alone.statuses[0]!.limit_remaining).toBe(9);
  });

  it('requests_per_unit 0 blocks everything', async () => {
    const r = await t.rls.call(one('rules', ['blocked', 'q']));
    expect(r.overall_code).toBe('OVER_LIMIT');
    expect(header(r, 'Retry-After')).toBe('3600');
  });

  it('honours hits_addend: the request-level value, a descriptor value, and 0 as check only', async () => {
    const req = { ...one('rules', ['generic', 'h']), hits_addend: 4 };
    expect(codes(await repeat(t.rls, req, 3))).toEqual(['OK', 'OK', 'OVER_LIMIT']); // 4 + 4, then 12 > 10
    const check = { domain: 'rules', descriptors: [{ entries: [{ key: 'generic', value: 'h' }], hits_addend: { value: 0 } }] };
    const peek = await t.rls.call(check);
    expect(peek.overall_code).toBe('OK');
    expect(peek.statuses[0]!.limit_remaining).toBe(2);
    expect((await t.rls.call(check)).statuses[0]!.limit_remaining).toBe(2); // nothing counted
    const two = { domain: 'rules', descriptors: [{ entries: [{ key: 'generic', value: 'h' }], hits_addend: { value: 2 } }], hits_addend: 9 };
    expect((await t.rls.call(two)).overall_code).toBe('OK'); // the descriptor's 2 wins over the request's 9
    const full = await t.rls.call(check);
    expect(full.statuses[0]!.code).toBe('OVER_LIMIT');
    expect(full.overall_code).toBe('OVER_LIMIT');
  });

  it("honours Envoy's limit override, even for descriptors no rule matches", async () => {
    const req = {
      domain: 'rules',
      descriptors: [{ entries: [{ key: 'nothing', value: 'o' }], limit: { requests_per_unit: 2, unit: 'MINUTE' } }],
    };
    const rs = await repeat(t.rls, req, 3);
    expect(codes(rs)).toEqual(['OK', 'OK', 'OVER_LIMIT']);
    expect(rs[0]!.statuses[0]!.current_limit).toMatchObject({ requests_per_unit: 2, unit: 'MINUTE' });
    const ruled = { domain: 'rules', descriptors: [{ entries: [{ key: 'generic', value: 'o' }], limit: { requests_per_unit: 1, unit: 'SECOND' } }] };
    expect(codes(await repeat(t.rls, ruled, 2))).toEqual(['OK', 'OVER_LIMIT']);
  });

  it('sliding window: the previous window still weighs on the current one', async () => {
    const req = one('rules', ['slide', 's']);
    expect(codes(await repeat(t.rls, req, 11)).filter((c) => c === 'OK')).toHaveLength(10);
    // 15 s into the next minute, the previous 10 weigh 10 * 45/60 = 7.5: 2 more fit (9.5), the 3rd would not.
    t.clock.set(HOUR_START + 75_000);
    const rs = await repeat(t.rls, req, 3);
    expect(codes(rs)).toEqual(['OK', 'OK', 'OVER_LIMIT']);
    // With 2 in this minute, room for 1 more comes when 10 * (60 - e)/60 <= 7, at e = 18 s: 3 s from now.
    expect(header(rs[2]!, 'Retry-After')).toBe('3');
    t.clock.set(HOUR_START + 78_000);
    expect((await t.rls.call(req)).overall_code).toBe('OK');
  });

  it('draft style: RateLimit-Policy lists the windows, RateLimit reports the longest', async () => {
    const r = await t.rls.call(one('draft', ['k', 'v']));
    expect(header(r, 'RateLimit-Policy')).toBe('"k-second";q=2;w=1, "k-hour";q=100;w=3600');
    expect(header(r, 'RateLimit')).toBe('"k-hour";r=99;t=3600');
    expect(header(r, 'X-RateLimit-Limit')).toBeUndefined();
  });

  it('custom header names, reporting the tightest window', async () => {
    const rs = await repeat(t.rls, one('custom', ['k', 'v']), 2);
    expect(header(rs[1]!, 'X-Quota-Limit')).toBe('2');
    expect(header(rs[1]!, 'X-Quota-Remaining')).toBe('0');
    expect(header(rs[1]!, 'X-Quota-Reset')).toBe(String(HOUR_START / 1000 + 1));
  });
});
