import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/counters/clock.js';
import { RedisStore } from '../../src/store/redis-store.js';
import { counterCheck as check } from '../helpers/checks.js';
import { SLIDING } from '../helpers/kinds.js';
import { metric, scrape } from '../helpers/metrics.js';
import { type RedisServer, startRedis } from '../helpers/redis.js';
import { configDir, header, type RlsRequest, startTestService, type TestService } from '../helpers/service.js';
import { everyStore } from '../helpers/stores.js';
import { within } from '../helpers/time.js';

// Envoy 1.38's refunds (is_negative_hits: envoyproxy/envoy issue #41219, PR #44059): a descriptor whose hits are given back to
// its rule's windows, never refused. Before, the decoder skipped field 4 and a refund was counted as a charge.

const T0 = 1_800_000_000_000;

describe('refunds in the store', () => {
  const { stores, redis } = everyStore();
  // A refund is sent as the limiter sends it: op refund, in charge mode (plan.ts toChecks).
  const refund = (hits: number, over: Parameters<typeof check>[0] = {}) => check({ ...over, op: 'refund', hits, charge: true });

  describe.each(stores)('%s', (_name, make) => {
    it.each([
      ['fixed window', {}],
      ['sliding window', { kind: SLIDING }],
      ['token bucket', { burst: 10 }],
    ])('%s: gives back, never below empty, never refused', async (_kind, shape) => {
      const store = await make(new ManualClock(T0 + 100));
      const take = check({ key: 'r', limit: 10, hits: 3, windowMs: 3_600_000, ...shape });
      expect((await store.check([take])).admitted).toBe(true);
      const back = await store.check([refund(2, { key: 'r', limit: 10, windowMs: 3_600_000, ...shape })]);
      expect([back.admitted, back.over[0], back.counted?.[0]]).toEqual([true, false, -2]);
      // One of the 3 is still held; a refund of 5 gives back that one only.
      const more = await store.check([refund(5, { key: 'r', limit: 10, windowMs: 3_600_000, ...shape })]);
      expect(more.counted?.[0]).toBe(-1);
      const peek = await store.check([check({ key: 'r', limit: 10, hits: 0, windowMs: 3_600_000, ...shape })]);
      expect(peek.curr[0]).toBe(0);
      // Full again: 10 fit, the 11th does not, then a refund of 1 makes room for exactly one.
      expect((await store.check([{ ...take, hits: 10 }])).admitted).toBe(true);
      expect((await store.check([{ ...take, hits: 1 }])).admitted).toBe(false);
      await store.check([refund(1, { key: 'r', limit: 10, windowMs: 3_600_000, ...shape })]);
      expect((await store.check([{ ...take, hits: 1 }])).admitted).toBe(true);
      expect((await store.check([{ ...take, hits: 1 }])).admitted).toBe(false);
    });

    it('a refund on an empty counter writes nothing, and one beside a refused descriptor still gives back', async () => {
      const store = await make(new ManualClock(T0 + 100));
      const r = await store.check([refund(4, { key: 'empty', limit: 10 })]);
      expect([r.admitted, r.counted?.[0]]).toEqual([true, 0]);
      if (store instanceof RedisStore) expect(await redis().cli('--scan', '--pattern', '*empty*')).toBe('');
      await store.check([check({ key: 'x', limit: 5, hits: 5 })]);
      // One request: a refund on x and a descriptor over its limit. Refused, and the refund still given.
      const both = await store.check([refund(2, { key: 'x', limit: 5 }), check({ key: 'full', limit: 0, hits: 1, group: 1 })]);
      expect([both.admitted, both.over, both.counted]).toEqual([false, [false, true], [-2, 0]]);
      expect((await store.check([check({ key: 'x', limit: 5, hits: 0 })])).curr[0]).toBe(3);
    });
  });
});

const tenantConfig = `domain: api
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: sliding_tenant
    algorithm: sliding_window
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: bucket_tenant
    algorithm: token_bucket
    rate_limit: {unit: hour, requests_per_unit: 10}
`;
const call = (tenant: string, hits: number, refund = false, key = 'tenant'): RlsRequest => ({
  domain: 'api',
  descriptors: [{ entries: [{ key, value: tenant }], hits_addend: { value: hits }, ...(refund && { is_negative_hits: true }) }],
});

describe.each([
  ['memory', false],
  ['two replicas on one Redis', true],
])('refunds through the service: %s', (_name, shared) => {
  let redis: RedisServer | undefined;
  let a: TestService;
  let b: TestService;
  beforeAll(async () => {
    const dir = configDir({ 'api.yaml': tenantConfig });
    if (shared) {
      redis = await startRedis();
      const args = ['--store', 'redis', '--redis-url', redis.url, '--redis-timeout-ms', '1000'];
      [a, b] = await Promise.all([startTestService({ configDir: dir, args, realClock: true }), startTestService({ configDir: dir, args, realClock: true })]);
    } else {
      a = b = await startTestService({ configDir: dir, realClock: true });
    }
  });
  afterAll(async () => {
    await a?.close();
    if (b !== a) await b?.close();
    await redis?.stop();
  });

  it.each(['tenant', 'sliding_tenant', 'bucket_tenant'])("the new user's sequence on %s: take 3, Envoy 1.38 refunds 2, a check sees 9 left", async (key) => {
    const t = `t-${Math.random()}`;
    expect(header(await a.rls.call(call(t, 3, false, key)), 'X-RateLimit-Remaining')).toBe('7');
    const back = await b.rls.call(call(t, 2, true, key));
    expect([back.overall_code, back.statuses[0]!.limit_remaining]).toEqual(['OK', 9]);
    expect((await a.rls.call(call(t, 0, false, key))).statuses[0]!.limit_remaining).toBe(9);
    const { series } = await scrape(b.service.httpPort);
    expect(metric(series, 'tollgate_refunded_hits_total', { domain: 'api', rule: key })).toBeGreaterThanOrEqual(2);
    // Envoy's stream-done call is counted apart (stream_end), never as a 429.
    expect(metric(series, 'tollgate_requests_total', { domain: 'api', result: 'stream_end' })).toBeGreaterThanOrEqual(1);
  });

  it('a refund of 0 on a full window gives nothing and is never refused', async () => {
    const t = `t-${Math.random()}`;
    expect((await a.rls.call(call(t, 10))).overall_code).toBe('OK');
    const zero = await b.rls.call(call(t, 0, true));
    expect([zero.overall_code, zero.statuses[0]!.limit_remaining]).toEqual(['OK', 0]);
  });

  it("a window this replica's cache holds as full opens again when another replica takes a refund", async () => {
    const t = `t-${Math.random()}`;
    expect((await a.rls.call(call(t, 10))).overall_code).toBe('OK');
    // Refused twice: the second answer comes from a's over-limit cache.
    expect((await a.rls.call(call(t, 1))).overall_code).toBe('OVER_LIMIT');
    expect((await a.rls.call(call(t, 1))).overall_code).toBe('OVER_LIMIT');
    expect((await b.rls.call(call(t, 1, true))).overall_code).toBe('OK');
    // The announcement reaches a through Redis (pub/sub): wait for it, then exactly one more fits.
    await within(5000, async () => (await a.rls.call(call(t, 0))).overall_code === 'OK', 'refund seen by the other replica');
    expect((await a.rls.call(call(t, 1))).overall_code).toBe('OK');
    expect((await a.rls.call(call(t, 1))).overall_code).toBe('OVER_LIMIT');
  });
});
