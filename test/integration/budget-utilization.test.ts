import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryTierStore } from '../../src/control/tier-store.js';
import { fingerprint } from '../../src/fingerprint.js';
import { metric, scrape } from '../helpers/metrics.js';
import { randomFrom } from '../helpers/random.js';
import { configDir, type RlsRequest, startTestService, type TestService } from '../helpers/service.js';

// Utilization metrics for budget rules (issue 62, item 3): labels from the config only, so an alert can say
// "tenants of rule X are nearing their budget" without a series per tenant. Tenants charged at random, one in a
// tier of its own limit: the gauge of the fullest share equals the test's own ledger; limits and reserved
// tokens are what the config and the reservations say; a new window starts afresh.

const CONFIG = `domain: llm
token_key: tenant
tiers:
  enterprise: {}
descriptors:
  - key: tenant
    charge_mode: true
    reservation_key: request_id
    rate_limits:
      - {unit: hour, requests_per_unit: 1000, name: tokens-per-hour}
    tier_limits:
      enterprise:
        - {unit: hour, requests_per_unit: 4000, name: enterprise-tokens-per-hour}
  - key: bucket
    charge_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1000, algorithm: token_bucket, burst: 100}
  - key: trial
    charge_mode: true
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 10}
`;
const charge = (tenant: string, hits: number, id?: string): RlsRequest => ({
  domain: 'llm',
  descriptors: [{ entries: [{ key: 'tenant', value: tenant }, ...(id ? [{ key: 'request_id', value: id }] : [])], hits_addend: { value: hits } }],
});

describe('budget utilization metrics', () => {
  let s: TestService;
  const tiers = new MemoryTierStore();
  beforeAll(async () => {
    await tiers.assign({ fingerprint: fingerprint('big'), tier: 'enterprise', assignedAt: new Date().toISOString(), by: 'test' });
    s = await startTestService({ configDir: configDir({ 'llm.yaml': CONFIG }), tiers });
  });
  afterAll(() => s?.close());

  it('the fullest share by own limit equals a ledger; limits and reserved tokens; a new window starts afresh', async () => {
    const random = randomFrom(7);
    const spent = new Map<string, number>();
    const tenants = [...Array.from({ length: 40 }, (_, i) => `t${i}`), 'big'];
    for (let i = 0; i < 400; i++) {
      const tenant = tenants[Math.floor(random() * tenants.length)]!;
      const hits = 1 + Math.floor(random() * 40);
      await s.rls.call(charge(tenant, hits));
      spent.set(tenant, (spent.get(tenant) ?? 0) + hits);
    }
    // big spends most, but of 4,000: its share is its own limit's.
    await s.rls.call(charge('big', 2500));
    spent.set('big', spent.get('big')! + 2500);
    const limitOf = (t: string) => (t === 'big' ? 4000 : 1000);
    const ledger = Math.max(...[...spent].map(([t, n]) => Math.min(1, n / limitOf(t))));
    // Two reservations: their estimates are reserved tokens.
    await s.rls.call(charge('r1', 30, 'req-1'));
    await s.rls.call(charge('r2', 12, 'req-2'));
    const m = (await scrape(s.service.httpPort)).series;
    expect(metric(m, 'tollgate_budget_fullest_share', { rule: 'tenant', window: 'hour' })).toBeCloseTo(ledger, 9);
    expect(metric(m, 'tollgate_budget_limit', { rule: 'tenant', window: 'hour', tier: '' })).toBe(1000);
    expect(metric(m, 'tollgate_budget_limit', { rule: 'tenant', window: 'hour', tier: 'enterprise' })).toBe(4000);
    expect(metric(m, 'tollgate_reserved_hits_total', { rule: 'tenant' })).toBe(42);
    // A refund lowers a counter's share (its latest charge counts): big gives back 2,000 of its 4,000.
    await s.rls.call({ domain: 'llm', descriptors: [{ entries: [{ key: 'tenant', value: 'big' }], hits_addend: { value: 2000 }, is_negative_hits: true }] });
    spent.set('big', spent.get('big')! - 2000);
    const after = Math.max(...[...spent].map(([t, n]) => Math.min(1, n / limitOf(t))));
    expect(after).toBeLessThan(ledger);
    expect(metric((await scrape(s.service.httpPort)).series, 'tollgate_budget_fullest_share', { rule: 'tenant' })).toBeCloseTo(after, 9);
    // No tenant's value in any series.
    expect((await scrape(s.service.httpPort)).text).not.toMatch(/\bt\d+\b|big|req-1/);
    // A token bucket is as full as its burst is spent: 1 of 100 is 1 %, not 1,000 - 99 of 1,000.
    await s.rls.call({ domain: 'llm', descriptors: [{ entries: [{ key: 'bucket', value: 'b' }], hits_addend: { value: 1 } }] });
    // A shadow rule refuses nobody: however spent, it is not followed.
    await s.rls.call({ domain: 'llm', descriptors: [{ entries: [{ key: 'trial', value: 't' }], hits_addend: { value: 50 } }] });
    const more = (await scrape(s.service.httpPort)).series;
    expect(metric(more, 'tollgate_budget_fullest_share', { rule: 'bucket' })).toBeCloseTo(0.01, 9);
    expect(metric(more, 'tollgate_budget_fullest_share', { rule: 'trial' })).toBeUndefined();
    // The next hour: the old window's share goes; the first charge of the new one is the fullest.
    s.clock.advance(3_600_000);
    expect(metric((await scrape(s.service.httpPort)).series, 'tollgate_budget_fullest_share', { rule: 'tenant' })).toBeUndefined();
    await s.rls.call(charge('t1', 100));
    expect(metric((await scrape(s.service.httpPort)).series, 'tollgate_budget_fullest_share', { rule: 'tenant' })).toBeCloseTo(0.1, 9);
  });
});
