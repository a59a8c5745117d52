import { status } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestService, type RlsRequest, type TestService } from '../helpers/service.js';

const SECRET = 'Bearer s3cr3t-token-value';

describe('bad requests get INVALID_ARGUMENT naming the problem', () => {
  let t: TestService;
  beforeAll(async () => {
    t = await startTestService({ args: ['--max-descriptors', '3', '--max-entries', '4', '--max-value-bytes', '64'] });
  });
  afterAll(async () => t.close());

  const entry = (key: string, value: string) => ({ key, value });
  const cases: [string, RlsRequest, RegExp][] = [
    ['empty domain', { domain: '', descriptors: [{ entries: [entry('category', 'read')] }] }, /domain is empty/],
    ['no descriptors', { domain: 'property-api', descriptors: [] }, /no descriptors/],
    ['a descriptor with no entries', { domain: 'property-api', descriptors: [{ entries: [entry('a', 'b')] }, { entries: [] }] }, /descriptors\[1\] has no entries/],
    ['an empty key', { domain: 'property-api', descriptors: [{ entries: [entry('category', 'read'), entry('', SECRET)] }] }, /descriptors\[0\]\.entries\[1\] has an empty key/],
    ['too many descriptors', { domain: 'property-api', descriptors: Array(4).fill({ entries: [entry('a', 'b')] }) }, /4 descriptors, more than the maximum of 3/],
    ['too many entries', { domain: 'property-api', descriptors: [{ entries: Array(5).fill(entry('a', 'b')) }] }, /5 entries, more than the maximum of 4/],
    ['a value over the maximum length', { domain: 'property-api', descriptors: [{ entries: [entry('token', `${SECRET}${'x'.repeat(100)}`)] }] }, /entries\[0\] \(key "token"\): value is 125 bytes, more than the maximum of 64/],
    ['a key over the maximum length', { domain: 'property-api', descriptors: [{ entries: [entry('k'.repeat(65), 'v')] }] }, /key is longer than 64 bytes/],
    ['a WEEK override, which RateLimitUnit lacks', { domain: 'property-api', descriptors: [{ entries: [entry('a', 'b')], limit: { requests_per_unit: 1, unit: 7 } }] }, /limit\.unit must be SECOND/],
  ];

  it.each(cases)('%s', async (_name, req, message) => {
    const err = await t.rls.call(req).then(
      () => undefined,
      (e: { code: number; details: string }) => e,
    );
    expect(err?.code).toBe(status.INVALID_ARGUMENT);
    expect(err?.details).toMatch(message);
    expect(err?.details).not.toContain('s3cr3t');
  });

  it('keeps serving after bad input', async () => {
    const ok = await t.rls.call({ domain: 'property-api', descriptors: [{ entries: [entry('category', 'read'), entry('token', SECRET)] }] });
    expect(ok.overall_code).toBe('OK');
  });
});
