import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { header, type RlsRequest, type RlsResponse, repeat, startTestService, type TestService } from '../helpers/service.js';

/** envoyproxy/ratelimit's README, Examples 1-11, replayed against a real Tollgate: each `it` states what that
 * README says the example does (test/fixtures/ratelimit-examples holds its configurations). */

const d = (domain: string, ...descriptors: [string, string][][]): RlsRequest => ({
  domain,
  descriptors: descriptors.map((entries) => ({ entries: entries.map(([key, value]) => ({ key, value })) })),
});
const codes = (rs: RlsResponse[]): string[] => rs.map((r) => r.overall_code);
const MAX_UINT32 = 4294967295;

describe('envoyproxy/ratelimit README examples, Example 9 merged from three files (MERGE_DOMAIN_CONFIG)', () => {
  let t: TestService;
  beforeAll(async () => {
    t = await startTestService({ configDir: 'test/fixtures/ratelimit-examples', env: { MERGE_DOMAIN_CONFIG: 'true' } });
  });
  afterAll(async () => t?.close());

  it('1: database=users gets 500 a second', async () => {
    const req = { ...d('mongo_cps', [['database', 'users']]), hits_addend: 500 };
    expect((await t.rls.call(req)).overall_code).toBe('OK');
    const next = await t.rls.call(d('mongo_cps', [['database', 'users']]));
    expect(next.overall_code).toBe('OVER_LIMIT');
    expect(next.statuses[0]!.current_limit).toMatchObject({ requests_per_unit: 500, unit: 'SECOND' });
    expect((await t.rls.call(d('mongo_cps', [['database', 'default']]))).overall_code).toBe('OK'); // its own counter
  });

  it('2: 5 marketing messages a day to a number, 100 messages a day to any number, as a logical OR', async () => {
    const both = d(
      'messaging',
      [
        ['message_type', 'marketing'],
        ['to_number', '2061111111'],
      ],
      [['to_number', '2061111111']],
    );
    const rs = await repeat(t.rls, both, 6);
    expect(codes(rs)).toEqual(['OK', 'OK', 'OK', 'OK', 'OK', 'OVER_LIMIT']);
    expect(rs[5]!.statuses.map((s) => s.code)).toEqual(['OVER_LIMIT', 'OK']);
    expect(rs[4]!.statuses[1]!.limit_remaining).toBe(95);
    // Another number has its own 5.
    expect(
      (
        await t.rls.call(
          d('messaging', [
            ['message_type', 'marketing'],
            ['to_number', '2062222222'],
          ]),
        )
      ).overall_code,
    ).toBe('OK');
  });

  it('3: key/value is matched before key alone: 50.0.0.5 is blocked, 50.0.0.1 gets 10 a second', async () => {
    expect((await t.rls.call(d('edge_proxy_per_ip', [['remote_address', '50.0.0.5']]))).overall_code).toBe('OVER_LIMIT');
    expect(codes(await repeat(t.rls, d('edge_proxy_per_ip', [['remote_address', '50.0.0.1']]), 11)).slice(9)).toEqual(['OK', 'OVER_LIMIT']);
  });

  it('4: a request with more entries than the config has levels matches nothing; the nested config matches', async () => {
    const deep = (domain: string): RlsRequest =>
      d(domain, [
        ['key', 'value'],
        ['subkey', 'subvalue'],
      ]);
    expect((await t.rls.call(deep('example4'))).statuses[0]!.current_limit).toBeNull();
    expect((await t.rls.call(deep('example4b'))).statuses[0]!.current_limit).toMatchObject({ requests_per_unit: 300 });
  });

  it('5: an unlimited descriptor is OK with LimitRemaining MaxUint32', async () => {
    const r = await t.rls.call(d('internal', [['ldap', 'x']]));
    expect(r.overall_code).toBe('OK');
    expect(r.statuses[0]).toMatchObject({ code: 'OK', current_limit: null, limit_remaining: MAX_UINT32 });
    expect((await t.rls.call(d('internal', [['azure', 'x']]))).statuses[0]!.limit_remaining).toBe(99);
    // A descriptor no rule matches is not unlimited: remaining 0, as envoyproxy/ratelimit answers it.
    expect((await t.rls.call(d('internal', [['nothing', 'x']]))).statuses[0]!.limit_remaining).toBe(0);
  });

  it('6: user-a (shadow_mode) is never limited and its status stays OK; user-b gets 20 a second', async () => {
    const a = await repeat(
      t.rls,
      d('example6', [
        ['service', 'auth-service'],
        ['user', 'user-a'],
      ]),
      12,
    );
    expect(codes(a)).toEqual(Array(12).fill('OK'));
    expect(a[11]!.statuses[0]).toMatchObject({ code: 'OK', limit_remaining: 0 });
    expect(header(a[11]!, 'Retry-After')).toBeUndefined();
    const b = await repeat(
      t.rls,
      d('example6', [
        ['service', 'auth-service'],
        ['user', 'user-b'],
      ]),
      21,
    );
    expect(codes(b).slice(19)).toEqual(['OK', 'OVER_LIMIT']);
  });

  it('7: replaces: both descriptors together give 10 a second, and leave the 5 a second limit untouched', async () => {
    const both = d(
      'example7',
      [
        ['key_1', 'value_1'],
        ['user', 'bkthomps'],
      ],
      [
        ['key_2', 'value_2'],
        ['user', 'bkthomps'],
      ],
    );
    expect(codes(await repeat(t.rls, both, 11)).slice(9)).toEqual(['OK', 'OVER_LIMIT']);
    // The replaced limit was not counted: its own 5 are all still there.
    expect(
      codes(
        await repeat(
          t.rls,
          d('example7', [
            ['key_1', 'value_1'],
            ['user', 'bkthomps'],
          ]),
          6,
        ),
      ).slice(4),
    ).toEqual(['OK', 'OVER_LIMIT']);
  });

  it('8: any other value of key1 gets 10 a minute each, value1 gets 20', async () => {
    expect((await t.rls.call(d('example8', [['key1', 'unspecified_value']]))).statuses[0]!.current_limit).toMatchObject({ requests_per_unit: 10 });
    expect((await t.rls.call(d('example8', [['key1', 'unspecified_value2']]))).statuses[0]!.limit_remaining).toBe(9);
    expect((await t.rls.call(d('example8', [['key1', 'value1']]))).statuses[0]!.current_limit).toMatchObject({ requests_per_unit: 20 });
  });

  it('9: wildcards: trailing, middle (prefix and suffix), several in order', async () => {
    const limitOf = async (key: string, value: string): Promise<number | undefined> =>
      (await t.rls.call(d('example9', [[key, value]]))).statuses[0]!.current_limit?.requests_per_unit;
    for (const v of ['value1', 'value2', 'valueXYZ']) expect(await limitOf('key1', v)).toBe(20);
    for (const v of ['/api/123/action', '/api/user-id/action']) expect(await limitOf('path', v)).toBe(20);
    expect(await limitOf('path', '/api/123/other')).toBeUndefined();
    for (const v of ['/api/v1/resource/123/action', '/api/v2/resource/456/action']) expect(await limitOf('route', v)).toBe(20);
    // Each matching value has its own counter (no share_threshold).
    expect((await t.rls.call(d('example9', [['key1', 'valueABC']]))).statuses[0]!.limit_remaining).toBe(19);
  });

  it('10: route and http_method of any value, subject_id: 60 a minute per combination', async () => {
    const r = await t.rls.call(
      d('example10', [
        ['route', 'api'],
        ['http_method', 'GET'],
        ['subject_id', '123'],
      ]),
    );
    expect(r.statuses[0]).toMatchObject({ code: 'OK', limit_remaining: 59 });
    expect(
      (
        await t.rls.call(
          d('example10', [
            ['route', 'web'],
            ['http_method', 'POST'],
            ['subject_id', '456'],
          ]),
        )
      ).statuses[0]!.limit_remaining,
    ).toBe(59);
    const w = await t.rls.call(
      d('example10_wildcard', [
        ['user', 'alice'],
        ['action', 'readfile'],
        ['resource', 'documents'],
      ]),
    );
    expect(w.statuses[0]).toMatchObject({ code: 'OK', limit_remaining: 99 });
  });

  it('11: share_threshold: 5 files/a.pdf and 5 files/b.csv leave files/c.txt over; files_no_share/* each have 10', async () => {
    const file = (key: string, value: string): RlsRequest => d('example11', [[key, value]]);
    expect(codes(await repeat(t.rls, file('files', 'files/a.pdf'), 5))).toEqual(Array(5).fill('OK'));
    expect(codes(await repeat(t.rls, file('files', 'files/b.csv'), 5))).toEqual(Array(5).fill('OK'));
    expect((await t.rls.call(file('files', 'files/c.txt'))).overall_code).toBe('OVER_LIMIT');
    expect(codes(await repeat(t.rls, file('files_no_share', 'files_no_share/a.pdf'), 11)).slice(9)).toEqual(['OK', 'OVER_LIMIT']);
    expect((await t.rls.call(file('files_no_share', 'files_no_share/b.csv'))).overall_code).toBe('OK');
    // Nested: every api/* route shares the method's counter.
    const route = (r: string): RlsRequest =>
      d('example11_metrics', [
        ['route', r],
        ['method', 'GET'],
      ]);
    await t.rls.call(route('api/v1'));
    expect((await t.rls.call(route('api/v2'))).statuses[0]!.limit_remaining).toBe(58);
  });
});
