import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { MemoryTierStore } from '../../src/control/tier-store.js';
import { fingerprint } from '../../src/fingerprint.js';
import { HOUR_START, header, property, repeat, startTestService, type TestService } from '../helpers/service.js';

// The bundled config/property-api.yaml, served through the real gRPC server, with time under test control.
describe('property API limits over gRPC', () => {
  let t: TestService;
  const tiers = new MemoryTierStore();
  let n = 0;
  /** A token no other test has used, so each test starts with empty counters. */
  const freshToken = (): string => `Bearer token-${++n}-${Math.random()}`;

  beforeAll(async () => {
    t = await startTestService({ tiers });
  });
  afterAll(async () => t.close());
  beforeEach(() => t.clock.set(HOUR_START + 200));

  it.each([
    ['read', 10, 1000],
    ['reports', 2, 200],
    ['write', 5, 500],
  ])('%s: admits %i in one second, then 429 with Retry-After and a problem body', async (category, perSecond, perHour) => {
    const req = property(category, freshToken());
    const burst = await repeat(t.rls, req, perSecond);
    expect(burst.map((r) => r.overall_code)).toEqual(Array(perSecond).fill('OK'));
    // Headers report the hourly window, counting down.
    expect(burst.map((r) => header(r, 'X-RateLimit-Limit'))).toEqual(Array(perSecond).fill(String(perHour)));
    expect(burst.map((r) => Number(header(r, 'X-RateLimit-Remaining')))).toEqual(Array.from({ length: perSecond }, (_, i) => perHour - 1 - i));
    expect(header(burst[0]!, 'X-RateLimit-Reset')).toBe(String((HOUR_START + 3600_000) / 1000));
    expect(header(burst[0]!, 'Retry-After')).toBeUndefined();

    const over = await t.rls.call(req);
    expect(over.overall_code).toBe('OVER_LIMIT');
    expect(over.statuses[0]!.code).toBe('OVER_LIMIT');
    expect(over.statuses[0]!.current_limit).toEqual({ name: `${category}-per-second`, requests_per_unit: perSecond, unit: 'SECOND' });
    expect(header(over, 'Retry-After')).toBe('1');
    expect(header(over, 'X-RateLimit-Limit')).toBe(String(perHour));
    expect(header(over, 'X-RateLimit-Remaining')).toBe(String(perHour - perSecond));
    expect(header(over, 'content-type')).toBe('application/problem+json');
    const body = JSON.parse(over.raw_body.toString('utf8'));
    expect(body).toMatchObject({
      type: 'https://iana.org/assignments/http-problem-types#quota-exceeded',
      status: 429,
      'violated-policies': [`${category}-per-second`],
      retry_after: 1,
      limit: `${category}-per-second`,
    });
  });

  it('rejected requests do not consume hourly quota', async () => {
    const req = property('read', freshToken());
    const first = await repeat(t.rls, req, 25); // 10 admitted, 15 rejected
    expect(first.filter((r) => r.overall_code === 'OK')).toHaveLength(10);
    t.clock.advance(1000);
    const next = await t.rls.call(req);
    expect(next.overall_code).toBe('OK');
    expect(header(next, 'X-RateLimit-Remaining')).toBe('989'); // 11 counted, not 26
  });

  it('the hourly limit holds across seconds, and Retry-After points at the hour end', async () => {
    const req = property('reports', freshToken());
    let admitted = 0;
    for (let s = 0; s < 110; s++) {
      t.clock.set(HOUR_START + s * 1000 + 5);
      for (const r of await repeat(t.rls, req, 2)) if (r.overall_code === 'OK') admitted++;
    }
    expect(admitted).toBe(200);
    const over = await t.rls.call(req);
    expect(over.overall_code).toBe('OVER_LIMIT');
    expect(over.statuses[0]!.current_limit?.name).toBe('reports-per-hour');
    expect(header(over, 'X-RateLimit-Remaining')).toBe('0');
    // Now 109.005 s into the hour: 3490.995 s left, rounded up.
    expect(header(over, 'Retry-After')).toBe('3491');
    t.clock.set(HOUR_START + 3600_000);
    expect((await t.rls.call(req)).overall_code).toBe('OK');
  });

  it('counts each token separately, and the Bearer scheme does not split a token', async () => {
    const token = freshToken();
    await repeat(t.rls, property('write', token), 5);
    expect((await t.rls.call(property('write', token.replace('Bearer ', '')))).overall_code).toBe('OVER_LIMIT');
    expect((await t.rls.call(property('write', freshToken()))).overall_code).toBe('OK');
  });

  it('categories have separate counters for one token', async () => {
    const token = freshToken();
    await repeat(t.rls, property('reports', token), 2);
    expect((await t.rls.call(property('reports', token))).overall_code).toBe('OVER_LIMIT');
    expect((await t.rls.call(property('read', token))).overall_code).toBe('OK');
  });

  it('requests without a token share the anonymous bucket of their category', async () => {
    // Other tests do not use anonymous requests; move to a fresh second anyway.
    t.clock.set(HOUR_START + 7_000);
    const results = await repeat(t.rls, property('write'), 6);
    expect(results.map((r) => r.overall_code)).toEqual(['OK', 'OK', 'OK', 'OK', 'OK', 'OVER_LIMIT']);
    expect(results[5]!.statuses[0]!.current_limit?.name).toBe('write-anonymous-per-second');
  });

  it('the multi-property-group tier raises read to 30/s and write to 15/s, hourly unchanged', async () => {
    const token = freshToken();
    await tiers.assign({ fingerprint: fingerprint(token), tier: 'multi-property-group', assignedAt: new Date().toISOString(), by: 'test' });
    const reads = await repeat(t.rls, property('read', token), 31);
    expect(reads.filter((r) => r.overall_code === 'OK')).toHaveLength(30);
    expect(header(reads[0]!, 'X-RateLimit-Limit')).toBe('1000');
    const writes = await repeat(t.rls, property('write', token), 16);
    expect(writes.filter((r) => r.overall_code === 'OK')).toHaveLength(15);
    // Reports has no tier limits: unchanged.
    const reports = await repeat(t.rls, property('reports', token), 3);
    expect(reports.filter((r) => r.overall_code === 'OK')).toHaveLength(2);
    await tiers.remove(fingerprint(token));
    t.clock.advance(1000);
    const back = await repeat(t.rls, property('read', token), 11);
    expect(back.filter((r) => r.overall_code === 'OK')).toHaveLength(10);
  });

  it('a category the config does not know passes with OK and no headers', async () => {
    const res = await t.rls.call(property('admin', freshToken()));
    expect(res.overall_code).toBe('OK');
    expect(res.statuses).toHaveLength(1);
    expect(res.statuses[0]!.code).toBe('OK');
    expect(res.response_headers_to_add).toEqual([]);
  });

  it('an unknown domain is OK', async () => {
    const res = await t.rls.call({ domain: 'nobody', descriptors: [{ entries: [{ key: 'category', value: 'read' }] }] });
    expect(res.overall_code).toBe('OK');
    expect(res.statuses.map((s) => s.code)).toEqual(['OK']);
  });
});
