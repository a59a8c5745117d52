import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fingerprint } from '../../src/fingerprint.js';
import { metric, scrape } from '../helpers/metrics.js';
import { property, repeat, startTestService, type TestService } from '../helpers/service.js';

const READ = { domain: 'property-api', rule: 'category_read.token', category: 'read' };
const REPORTS = { domain: 'property-api', rule: 'category_reports.token', category: 'reports' };

describe('/metrics after real traffic', () => {
  let t: TestService;
  beforeAll(async () => {
    t = await startTestService();
    await repeat(t.rls, property('read', 'Bearer metrics-a'), 12); // 10 ok, 2 over
    await repeat(t.rls, property('reports', 'Bearer metrics-b'), 3); // 2 ok, 1 over
    await t.rls.call({ domain: 'elsewhere', descriptors: [{ entries: [{ key: 'x', value: 'y' }] }] });
    await t.rls.call({ domain: '', descriptors: [] }).catch(() => undefined);
  });
  afterAll(async () => t.close());

  it('counts decisions by rule, category, result and source', async () => {
    const { series } = await scrape(t.service.httpPort);
    expect(metric(series, 'tollgate_decisions_total', { ...READ, result: 'ok', source: 'store' })).toBe(10);
    expect(metric(series, 'tollgate_decisions_total', { ...READ, result: 'over_limit', source: 'store' })).toBe(2);
    expect(metric(series, 'tollgate_decisions_total', { ...REPORTS, result: 'over_limit' })).toBe(1);
    expect(metric(series, 'tollgate_hits_total', READ)).toBe(12);
    expect(metric(series, 'tollgate_requests_total', { domain: 'property-api', result: 'ok' })).toBe(12);
    expect(metric(series, 'tollgate_requests_total', { domain: 'property-api', result: 'over_limit' })).toBe(3);
    expect(metric(series, 'tollgate_requests_total', { domain: '(unknown)', result: 'ok' })).toBe(1);
  });

  it('counts near-limit and over-limit windows', async () => {
    const { series } = await scrape(t.service.httpPort);
    // 10/s with the near ratio 0.8: the 8th, 9th and 10th admitted reads are near the limit.
    expect(metric(series, 'tollgate_near_limit_total', { ...READ, window: 'second' })).toBe(3);
    expect(metric(series, 'tollgate_near_limit_total', { ...READ, window: 'hour' })).toBeUndefined();
    expect(metric(series, 'tollgate_over_limit_total', { ...READ, window: 'second' })).toBe(2);
  });

  it('has latency histograms, errors by code, config, store and process metrics', async () => {
    const { series } = await scrape(t.service.httpPort);
    expect(metric(series, 'tollgate_should_rate_limit_duration_seconds_count')).toBe(16);
    expect(metric(series, 'tollgate_store_duration_seconds_count', { store: 'memory' })).toBe(15);
    expect(metric(series, 'tollgate_grpc_errors_total', { code: 'INVALID_ARGUMENT' })).toBe(1);
    expect(metric(series, 'tollgate_config_info', { hash: t.service.config().hash })).toBe(1);
    expect(metric(series, 'tollgate_store_degraded', { store: 'memory' })).toBe(0);
    expect(metric(series, 'tollgate_memory_store_counters')).toBeGreaterThan(0);
    expect(metric(series, 'process_cpu_user_seconds_total')).toBeGreaterThan(0);
    expect(metric(series, 'nodejs_heap_size_total_bytes')).toBeGreaterThan(0);
  });

  it('never shows a token or a fingerprint', async () => {
    const { text } = await scrape(t.service.httpPort);
    for (const secret of ['metrics-a', fingerprint('metrics-a'), 'Bearer']) expect(text).not.toContain(secret);
  });

  it('10,000 distinct tokens add no series', async () => {
    const before = (await scrape(t.service.httpPort)).series;
    for (let batch = 0; batch < 100; batch++) {
      await Promise.all(Array.from({ length: 100 }, (_, i) => t.rls.call(property('read', `Bearer many-${batch}-${i}`))));
    }
    const after = (await scrape(t.service.httpPort)).series;
    const tollgate = (m: Map<string, number>): string[] => [...m.keys()].filter((k) => k.startsWith('tollgate_')).sort();
    expect(tollgate(after)).toEqual(tollgate(before));
    expect(metric(after, 'tollgate_decisions_total', { ...READ, result: 'ok', source: 'store' })).toBe(10_010);
  });
});

describe('global shadow mode', () => {
  let t: TestService;
  beforeAll(async () => {
    t = await startTestService({ args: ['--shadow-mode', 'true'] });
  });
  afterAll(async () => t.close());

  it('admits everything, reports what it would have rejected, and counts shadow rejections apart', async () => {
    const rs = await repeat(t.rls, property('write', 'Bearer shadowed'), 7);
    expect(rs.map((r) => r.overall_code)).toEqual(Array(7).fill('OK'));
    expect(rs.map((r) => r.statuses[0]!.code)).toEqual([...Array(5).fill('OK'), 'OVER_LIMIT', 'OVER_LIMIT']);
    // Clients see nothing of the shadow evaluation.
    expect(rs[6]!.response_headers_to_add).toEqual([]);
    const { series } = await scrape(t.service.httpPort);
    const WRITE = { domain: 'property-api', rule: 'category_write.token', category: 'write' };
    expect(metric(series, 'tollgate_decisions_total', { ...WRITE, result: 'shadow_over_limit' })).toBe(2);
    expect(metric(series, 'tollgate_decisions_total', { ...WRITE, result: 'over_limit' })).toBeUndefined();
  });
});
