import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compileSources } from '../../src/config/load.js';
import { ManualClock } from '../../src/counters/clock.js';
import { type DecisionInput, Limiter } from '../../src/limiter/limiter.js';
import { inFlightCall } from '../helpers/checks.js';
import { metric, scrape } from '../helpers/metrics.js';
import { type RedisServer, startRedis } from '../helpers/redis.js';
import { configDir, type RlsRequest, startTestService, type TestService } from '../helpers/service.js';
import { everyStore } from '../helpers/stores.js';

// No silent bypass of an in-flight limit or a refund (issue 61, item 5): an id of any length holds its slot by
// its fingerprint (a refusal failed the whole call, which an Envoy with failure_mode_deny: false lets through
// unchecked), an empty id holds nothing and is refused, and a rule with `refunds: false` gives nothing back.
// The same answers from every store.

const CONFIG = `domain: k
descriptors:
  - key: tenant
    in_flight: {limit: 2, lease: 1h, request_key: request_id}
  - key: plan
    refunds: false
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: premium
    refunds: false
    rate_limit: {unit: hour, requests_per_unit: 100, name: premium-hourly, replaces: [{name: small-hourly}]}
  - key: other
    rate_limit: {unit: hour, requests_per_unit: 1, name: small-hourly}
`;
const T0 = 1_800_000_000_000;
const SECRET = 's3cr3t';
const LONG = (n: number) => `${SECRET}-${n}-${'x'.repeat(300)}`;

const slot = (id: string, giveBack = false): DecisionInput => inFlightCall({ domain: 'k', key: 'tenant', value: 'acme' }, id, giveBack);
const plan = (hits: number, refund = false): DecisionInput => ({
  domain: 'k',
  hits,
  descriptors: [{ entries: [{ key: 'plan', value: 'free' }], ...(refund && { refund }) }],
});

describe('in-flight ids and refused refunds, on every store', () => {
  const { stores } = everyStore({ cluster: true });
  const config = compileSources([{ file: 'k.yaml', text: CONFIG }]);

  it.each(stores)('%s: a 300-byte id holds its slot and gives it back; an empty id holds nothing', async (_name, make) => {
    const clock = new ManualClock(T0);
    const limiter = new Limiter({ config: () => config, store: await make(clock), clock });
    const over = async (d: DecisionInput) => (await limiter.decide(d)).overLimit;
    expect(await over(slot(LONG(1)))).toBe(false);
    expect(await over(slot(LONG(2)))).toBe(false);
    // Both slots held by the long ids: a third request is refused, and so is the same id again only if new.
    expect(await over(slot('short'))).toBe(true);
    expect(await over(slot(LONG(1)))).toBe(false);
    // The long id's give-back returns its slot.
    expect(await over(slot(LONG(1), true))).toBe(false);
    expect(await over(slot('short'))).toBe(false);
    expect(await over(slot('short', true))).toBe(false);
    // An empty id is refused, even with a slot free, and takes none: two ids still fit after it. A check with
    // it (hits 0) says, as any, whether one more fits.
    expect(await over(slot(''))).toBe(true);
    expect(await over(slot(''))).toBe(true);
    expect(await over({ ...slot(''), hits: 0 })).toBe(false);
    expect(await over(slot('a'))).toBe(false);
    expect(await over(slot('b'))).toBe(true);
  });

  it.each(stores)('%s: a refund on a rule with refunds: false gives nothing back', async (_name, make) => {
    const clock = new ManualClock(T0);
    const limiter = new Limiter({ config: () => config, store: await make(clock), clock });
    for (let i = 0; i < 3; i++) expect((await limiter.decide(plan(1))).overLimit).toBe(false);
    // Answered, never refused (the counter is full): nothing checked, nothing given back.
    const refund = await limiter.decide(plan(2, true));
    expect(refund.overLimit).toBe(false);
    expect(refund.descriptors[0]).toMatchObject({ refundIgnored: true, op: undefined, windows: [] });
    expect(refund.descriptors[0]!.refunded).toBeUndefined();
    expect((await limiter.decide(plan(1))).overLimit).toBe(true);
  });

  it.each(stores)('%s: an ignored refund still replaces what its limits replace in the same call', async (_name, make) => {
    const clock = new ManualClock(T0);
    const limiter = new Limiter({ config: () => config, store: await make(clock), clock });
    const other = { entries: [{ key: 'other', value: 'o' }] };
    expect((await limiter.decide({ domain: 'k', hits: 1, descriptors: [other] })).overLimit).toBe(false);
    // small-hourly (1 an hour) is full, but premium-hourly replaces it in this call: the call is not refused.
    const mixed = await limiter.decide({ domain: 'k', hits: 1, descriptors: [{ entries: [{ key: 'premium', value: 'p' }], refund: true }, other] });
    expect(mixed.overLimit).toBe(false);
    expect(mixed.descriptors[1]!.windows).toEqual([]);
  });
});

describe('through the service, two replicas on one Redis', () => {
  let redis: RedisServer;
  let a: TestService;
  let b: TestService;
  beforeAll(async () => {
    redis = await startRedis();
    const dir = configDir({ 'k.yaml': CONFIG });
    const args = ['--store', 'redis', '--redis-url', redis.url, '--redis-timeout-ms', '1000'];
    [a, b] = await Promise.all([startTestService({ configDir: dir, args, realClock: true }), startTestService({ configDir: dir, args, realClock: true })]);
  }, 30_000);
  afterAll(async () => {
    await a?.close();
    await b?.close();
    await redis?.stop();
  });

  const rls = (id: string, refund = false): RlsRequest => ({
    domain: 'k',
    descriptors: [
      {
        entries: [
          { key: 'tenant', value: 'svc' },
          { key: 'request_id', value: id },
        ],
        ...(refund && { is_negative_hits: true }),
      },
    ],
  });

  it('a long id is answered, never an error, and never echoed; its give-back on the other replica returns the slot', async () => {
    const first = await a.rls.call(rls(LONG(7)));
    expect(first.overall_code).toBe('OK');
    expect(JSON.stringify(first)).not.toContain(SECRET);
    expect((await b.rls.call(rls(LONG(8)))).overall_code).toBe('OK');
    expect((await a.rls.call(rls('third'))).overall_code).toBe('OVER_LIMIT');
    await b.rls.call(rls(LONG(7), true));
    expect((await a.rls.call(rls('third'))).overall_code).toBe('OK');
  });

  it('a refund refused by its rule is counted by rule, and gives nothing back', async () => {
    const call = (refund: boolean): RlsRequest => ({
      domain: 'k',
      descriptors: [{ entries: [{ key: 'plan', value: 'team' }], hits_addend: { value: 3 }, ...(refund && { is_negative_hits: true }) }],
    });
    expect((await a.rls.call(call(false))).overall_code).toBe('OK');
    const before = (await scrape(b.service.httpPort)).series;
    const count = (series: typeof before, result: string) => metric(series, 'tollgate_requests_total', { domain: 'k', result }) ?? 0;
    // The stream-end calls are answered OK, never a 429, and counted as stream ends.
    expect((await b.rls.call(call(true))).overall_code).toBe('OK');
    expect((await b.rls.call(call(true))).overall_code).toBe('OK');
    expect((await a.rls.call({ ...call(false), descriptors: [{ entries: [{ key: 'plan', value: 'team' }] }] })).overall_code).toBe('OVER_LIMIT');
    const { series } = await scrape(b.service.httpPort);
    expect(metric(series, 'tollgate_refunds_ignored_total', { rule: 'plan' })).toBe(2);
    expect(metric(series, 'tollgate_refunded_hits_total', { rule: 'plan' }) ?? 0).toBe(0);
    expect(count(series, 'stream_end') - count(before, 'stream_end')).toBe(2);
    expect(count(series, 'over_limit') - count(before, 'over_limit')).toBe(0);
  });
});
