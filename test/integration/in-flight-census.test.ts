import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compileSources } from '../../src/config/load.js';
import { ManualClock } from '../../src/counters/clock.js';
import { fingerprint } from '../../src/fingerprint.js';
import { Limiter } from '../../src/limiter/limiter.js';
import { type RuleCensus, SlotCensusRunner } from '../../src/limiter/slot-census.js';
import { MAX_CENSUS, MAX_LISTED } from '../../src/store/store.js';
import { takeOf } from '../helpers/checks.js';
import { metric, scrape } from '../helpers/metrics.js';
import { capturingLogger, configDir, type RlsRequest, startTestService, type TestService } from '../helpers/service.js';
import { everyStore } from '../helpers/stores.js';

// What is held, seen (issue 61, item 4): a census reads each in_flight rule's counters where they are. Leases
// that ran out end at the census, not when the counter is next used; the slots held per rule come from the
// store, not from event counters; the counters nearest their own limit (a tier's for a client in one) are
// listed. Memory, one Redis, a 3-master Cluster; then the service's gauge and admin API.

const CONFIG = `domain: k
token_key: tenant
tiers:
  enterprise: {}
descriptors:
  - key: tenant
    in_flight: {limit: 4, lease: 10s, request_key: request_id}
    tier_limits:
      enterprise: {limit: 8}
`;
const T0 = 1_800_000_000_000;
const take = takeOf('k');

describe('the in-flight census, on every store', () => {
  const { stores } = everyStore({ cluster: true });
  const config = compileSources([{ file: 'k.yaml', text: CONFIG }]);
  const big = fingerprint('big');

  it.each(stores)('%s: held from the store, the fullest by their own limit, ended leases counted at the census', async (_name, make) => {
    const clock = new ManualClock(T0);
    const store = await make(clock);
    const counted: RuleCensus[] = [];
    const census = new SlotCensusRunner(
      store.slotCensus!,
      () => config,
      { counted: (c) => counted.push(c), failed: (e) => counted.push(e as never) },
      () => clock.now(),
    );
    const tiers = { tierOf: (fp: string) => (fp === big ? 'enterprise' : undefined) };
    const limiter = new Limiter({ config: () => config, store, clock, tiers, census });
    const takes = async (tenant: string, n: number, from = 0) => {
      for (let i = from; i < from + n; i++) expect((await limiter.decide(take(tenant, `${tenant}-${i}`))).overLimit).toBe(false);
    };
    // big: 6 of its tier's 8 (0.75); full: 4 of 4 (1); half: 2 of 4 (0.5); one: 1 of 4, taken later.
    await takes('big', 6);
    await takes('full', 4);
    await takes('half', 2);
    clock.advance(6000);
    await takes('one', 1);
    // A reading census may run at any time while requests land (the store writes nothing a take did not).
    await census.run();
    let c = census.all()[0]!.census;
    expect([c.held, c.expired, c.counters]).toEqual([13, 0, 4]);
    expect(c.top.map((t) => [t.key.includes(fingerprint('full')), t.held, t.limit])).toEqual([
      [true, 4, 4],
      [false, 6, 8],
      [false, 2, 4],
      [false, 1, 4],
    ]);
    // Past the first leases: nobody calls on those counters, the census ends them and counts them.
    clock.advance(5000);
    await census.run();
    c = census.all()[0]!.census;
    expect([c.held, c.expired, c.counters]).toEqual([1, 12, 4]);
    expect(c.top.map((t) => t.held)).toEqual([1]);
    // A later take on an ended counter finds nothing left to end: each lease is counted once.
    const d = await limiter.decide(take('full', 'again'));
    expect([d.overLimit, d.descriptors[0]!.slots]).toEqual([false, { event: 'taken', count: 1, expired: 0 }]);
    // Counters that hold none leave the list; one listed again by its take is counted.
    await census.run();
    expect([census.all()[0]!.census.counters, census.all()[0]!.census.held]).toEqual([2, 2]);
  });
});

describe('the census through the service: a gauge and the admin API', () => {
  const ADMIN = 'admin-credential-for-tests';
  let s: TestService;
  const log = capturingLogger();
  beforeAll(async () => {
    s = await startTestService({ configDir: configDir({ 'k.yaml': CONFIG }), env: { TOLLGATE_ADMIN_TOKEN: ADMIN }, logger: log.logger });
  });
  afterAll(() => s?.close());
  const rls = (tenant: string, id: string): RlsRequest => ({
    domain: 'k',
    descriptors: [
      {
        entries: [
          { key: 'tenant', value: tenant },
          { key: 'request_id', value: id },
        ],
      },
    ],
  });
  const admin = async (query: string) => {
    const r = await fetch(`http://127.0.0.1:${s.service.adminPort}/admin/in-flight${query}`, { headers: { authorization: `Bearer ${ADMIN}` } });
    return { status: r.status, body: (await r.json()) as { rules: { held: number; nearest: { counter: string; held: number; share: number }[] }[] } };
  };

  it('reads what is held, lists the fullest by fingerprint, and counts ended leases without a call on them', async () => {
    for (let i = 0; i < 3; i++) expect((await s.rls.call(rls('acme', `a${i}`))).overall_code).toBe('OK');
    expect((await s.rls.call(rls('beta', 'b0'))).overall_code).toBe('OK');
    await s.service.census!.run();
    expect(metric((await scrape(s.service.httpPort)).series, 'tollgate_in_flight_held', { rule: 'tenant' })).toBe(4);
    expect(metric((await scrape(s.service.httpPort)).series, 'tollgate_in_flight_fullest_share', { rule: 'tenant' })).toBe(0.75);
    const { status, body } = await admin('?top=1');
    expect(status).toBe(200);
    expect(body.rules[0]!.held).toBe(4);
    expect(body.rules[0]!.nearest).toEqual([{ counter: fingerprint('acme'), held: 3, limit: 4, share: 0.75 }]);
    expect(JSON.stringify(body)).not.toContain('acme');
    expect((await admin('?top=101')).status).toBe(400);
    s.clock.advance(11_000);
    await s.service.census!.run();
    const after = (await scrape(s.service.httpPort)).series;
    expect(metric(after, 'tollgate_in_flight_held', { rule: 'tenant' })).toBe(0);
    expect(metric(after, 'tollgate_in_flight_slots_total', { rule: 'tenant', event: 'expired' })).toBe(4);
    // The log says so, by rule: no tenant's value.
    const ended = log.lines().filter((l) => l.msg === 'in-flight leases ended unreturned');
    expect(ended.map((l) => [l.rule, l.expired, l.held])).toEqual([['tenant', 4, 0]]);
    expect(JSON.stringify(log.lines())).not.toContain('acme');
  });
});

describe('the census lists are bounded', () => {
  const { stores } = everyStore();
  it.each(stores)(
    `%s: a rule lists at most ${MAX_LISTED} counters, however many take`,
    async (_name, make) => {
      const store = await make(new ManualClock(T0));
      const census = store.slotCensus!;
      const keys = Array.from({ length: MAX_LISTED + 50 }, (_, i) => `{c${i}}:slots`);
      for (let i = 0; i < keys.length; i += 5000) await Promise.all(keys.slice(i, i + 5000).map((k) => census.note('flooded', k, 4, 60_000)));
      // The census reads its MAX_CENSUS and says there were more; none holds a slot, so those read leave.
      const first = await census.count('flooded', 10);
      expect([first.counters, first.partial, first.held]).toEqual([MAX_CENSUS, true, 0]);
      let left = MAX_LISTED - MAX_CENSUS;
      while (left > 0) {
        const c = await census.count('flooded', 10);
        expect(c.counters).toBe(Math.min(left, MAX_CENSUS));
        left -= c.counters;
      }
      expect((await census.count('flooded', 10)).counters).toBe(0);
    },
    60_000,
  );
});
