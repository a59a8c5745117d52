import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { compileSources } from '../../src/config/load.js';
import { ManualClock } from '../../src/counters/clock.js';
import { Limiter } from '../../src/limiter/limiter.js';
import { SLOT_GIVE_BACK } from '../../src/limits/charge-rules.js';
import type { CheckResult, CounterCheck } from '../../src/limits/check.js';
import { MemoryStore } from '../../src/store/memory-store.js';
import { RedisStore } from '../../src/store/redis-store.js';
import { counterCheck, slotOp } from '../helpers/checks.js';
import { SLOTS } from '../helpers/kinds.js';
import { metric, scrape } from '../helpers/metrics.js';
import { type RedisServer, startRedis } from '../helpers/redis.js';
import { configDir, header, RlsClient, type RlsRequest, startTestService, type TestService } from '../helpers/service.js';
import { everyStore } from '../helpers/stores.js';
import { within } from '../helpers/time.js';

// In-flight limits (in_flight: {limit, lease, request_key}): at most N requests at once over every replica,
// a slot given back by Envoy 1.38's stream-done refund, or returned by its lease. The same answers from every
// store (memory, one Redis, a Cluster), as the limiter sends the checks (plan.ts toChecks).

const T0 = 1_800_000_000_000;
const LEASE = 60_000;

/** An in-flight check of `limit` slots on counter `key`: hits > 0 take, < 0 give back. */
const slot = (hits: number, id: string | undefined, over: Partial<CounterCheck> = {}): CounterCheck =>
  counterCheck({ key: 'tenant:{t}:slots', windowMs: LEASE, limit: 5, ...slotOp(hits), kind: SLOTS, charge: true, slots: { id }, ...over });
const admitted = (rs: CheckResult[]): number => rs.filter((r) => r.admitted).length;

describe('in-flight slots in the store', () => {
  const { stores, redis } = everyStore({ cluster: true });
  describe.each(stores)('%s', (_name, make) => {
    it('10 takes at once against 5 admit exactly 5; two given back (one twice) admit exactly two more', async () => {
      const store = await make(new ManualClock(T0));
      const first = await Promise.all(Array.from({ length: 10 }, (_, i) => store.check([slot(1, `r${i}`)])));
      expect(admitted(first)).toBe(5);
      const holders = first.flatMap((r, i) => (r.admitted ? [`r${i}`] : []));
      // A refused take holds nothing: giving it back returns nothing.
      const refusedId = `r${first.findIndex((r) => !r.admitted)}`;
      const back = [holders[0]!, holders[1]!, holders[1]!, refusedId, 'never-seen'];
      const returned = await Promise.all(back.map((id) => store.check([slot(-1, id)])));
      expect(returned.map((r) => [r.admitted, r.over[0], r.counted?.[0]])).toEqual([
        [true, false, -1],
        [true, false, -1],
        [true, false, 0],
        [true, false, 0],
        [true, false, 0],
      ]);
      const second = await Promise.all(Array.from({ length: 5 }, (_, i) => store.check([slot(1, `s${i}`)])));
      expect(admitted(second)).toBe(2);
    });

    it('a take by an id that holds a slot takes no second one; each id keeps its own lease', async () => {
      const clock = new ManualClock(T0);
      const store = await make(clock);
      expect((await store.check([slot(1, 'a')])).counted?.[0]).toBe(1);
      const again = await store.check([slot(1, 'a')]);
      expect([again.admitted, again.curr[0], again.counted?.[0]]).toEqual([true, 1, 0]);
      clock.advance(LEASE / 2);
      await store.check([slot(1, 'b')]);
      // a's lease ends first: a slot of its comes back, b's stays.
      clock.advance(LEASE / 2);
      const r = await store.check([slot(0, undefined)]);
      expect([r.curr[0], r.slotsExpired?.[0]]).toEqual([1, 1]);
      clock.advance(LEASE / 2);
      expect((await store.check([slot(0, undefined)])).curr[0]).toBe(0);
    });

    it('slots as counts: a holder that never gives back gets its slots back after the lease', async () => {
      const clock = new ManualClock(T0);
      const store = await make(clock);
      expect((await store.check([slot(3, undefined)])).admitted).toBe(true);
      expect((await store.check([slot(2, undefined)])).admitted).toBe(true);
      expect((await store.check([slot(1, undefined)])).admitted).toBe(false);
      // A give-back of 4 returns the oldest holder's 3 and 1 of the next: 1 held.
      expect((await store.check([slot(-4, undefined)])).counted?.[0]).toBe(-4);
      expect((await store.check([slot(-9, undefined)])).counted?.[0]).toBe(-1);
      expect((await store.check([slot(5, undefined)])).admitted).toBe(true);
      clock.advance(LEASE - 1);
      expect((await store.check([slot(1, undefined)])).admitted).toBe(false);
      clock.advance(1);
      const after = await store.check([slot(1, undefined)]);
      expect([after.admitted, after.curr[0], after.slotsExpired?.[0]]).toEqual([true, 0, 5]);
    });

    it(`a give-back without an id returns what it asks up to ${SLOT_GIVE_BACK} a call, never more than is held`, async () => {
      const store = await make(new ManualClock(T0));
      const big = { limit: 3000 };
      const taken = await Promise.all(Array.from({ length: 250 }, () => store.check([slot(1, undefined, big)])));
      expect(admitted(taken)).toBe(250);
      expect((await store.check([slot(-60, undefined, big)])).counted?.[0]).toBe(-60);
      expect((await store.check([slot(-2200, undefined, big)])).counted?.[0]).toBe(-SLOT_GIVE_BACK);
      expect((await store.check([slot(0, undefined, big)])).curr[0]).toBe(250 - 60 - SLOT_GIVE_BACK);
      expect((await store.check([slot(-1000, undefined, big)])).counted?.[0]).toBe(-(250 - 60 - SLOT_GIVE_BACK));
    });

    it('an id taking again after its lease ended, among more than 100 that ended at once, holds one slot', async () => {
      const clock = new ManualClock(T0);
      const store = await make(clock);
      const big = { limit: 500 };
      await Promise.all(Array.from({ length: 150 }, (_, i) => store.check([slot(1, `old-${i}`, big)])));
      await store.check([slot(1, 'zz', big)]);
      clock.advance(LEASE / 2);
      await store.check([slot(1, 'live', big)]);
      clock.advance(LEASE / 2 + 1);
      expect((await store.check([slot(1, 'zz', big)])).admitted).toBe(true);
      for (let i = 0; i < 3; i++) await store.check([slot(0, undefined, big)]);
      await store.check([slot(-1, 'zz', big)]);
      await store.check([slot(-1, 'live', big)]);
      expect((await store.check([slot(0, undefined, big)])).curr[0]).toBe(0);
    });

    it('a lease shortened by a reload: older holders keep theirs, and their slots stay held', async () => {
      const clock = new ManualClock(T0);
      const store = await make(clock);
      const key = 'lease:{t}:slots';
      await store.check([slot(1, 'a', { key, limit: 2, windowMs: 3_600_000 })]);
      await store.check([slot(1, 'b', { key, limit: 2, windowMs: 1000 })]);
      if (store instanceof RedisStore) {
        for (const k of (await redis().cli('--scan', '--pattern', `*${key}*`)).split('\n'))
          expect(Number(await redis().cli('PTTL', k))).toBeGreaterThan(3_000_000);
      }
      clock.advance(2000);
      const after = await Promise.all(['c', 'd'].map((id) => store.check([slot(1, id, { key, limit: 2, windowMs: 1000 })])));
      expect(admitted(after)).toBe(1);
    });

    it('after a lease was shortened, a count-mode give-back returns the slot that would end soonest', async () => {
      const clock = new ManualClock(T0);
      const store = await make(clock);
      const key = 'order:{t}:slots';
      await store.check([slot(1, undefined, { key, limit: 2, windowMs: 10_000 })]);
      clock.advance(1);
      await store.check([slot(1, undefined, { key, limit: 2, windowMs: 2000 })]);
      clock.advance(1);
      await store.check([slot(-1, undefined, { key, limit: 2, windowMs: 2000 })]);
      // The 2-second holder went back; the 10-second one is still held at 5 s.
      clock.advance(5000);
      const r = await store.check([slot(1, undefined, { key, limit: 1, windowMs: 2000 })]);
      expect([r.admitted, r.curr[0]]).toEqual([false, 1]);
    });

    it("one request's descriptors on one counter never take more than the limit together", async () => {
      const store = await make(new ManualClock(T0));
      const r = await store.check([slot(1, 'x', { limit: 1 }), slot(1, 'y', { limit: 1, group: 1 }), slot(1, 'z', { limit: 1, group: 2 })]);
      expect(r.admitted).toBe(false);
      expect((await store.check([slot(0, undefined, { limit: 1 })])).curr[0]).toBe(0);
    });

    it('a take is all or nothing with the request: refused by another descriptor, it holds nothing', async () => {
      const store = await make(new ManualClock(T0));
      const full = counterCheck({ key: 'other:{t}:second', limit: 0, hits: 1, group: 1 });
      const r = await store.check([slot(1, 'x'), full]);
      expect([r.admitted, r.counted?.[0]]).toEqual([false, 0]);
      expect((await store.check([slot(0, undefined)])).curr[0]).toBe(0);
    });
  });
});

const config = `domain: api
descriptors:
  - key: tenant
    in_flight: {limit: 100, lease: 1m, request_key: request_id}
`;
const take = (tenant: string, id: string, back = false): RlsRequest => ({
  domain: 'api',
  descriptors: [
    {
      entries: [
        { key: 'tenant', value: tenant },
        { key: 'request_id', value: id },
      ],
      ...(back && { hits_addend: { value: 1 }, is_negative_hits: true }),
    },
  ],
});

describe('in-flight limits through the service: 3 replicas on one Redis', () => {
  let redis: RedisServer;
  let replicas: TestService[];
  beforeAll(async () => {
    redis = await startRedis();
    const dir = configDir({ 'api.yaml': config });
    const args = ['--store', 'redis', '--redis-url', redis.url, '--redis-timeout-ms', '5000'];
    replicas = await Promise.all([0, 1, 2].map(() => startTestService({ configDir: dir, args, realClock: true })));
  });
  afterAll(async () => {
    await Promise.all(replicas.map((r) => r.close()));
    await redis?.stop();
  });

  it('5,000 takes at once over 3 replicas against 100 hold exactly 100; each given back frees one', async () => {
    const t = `t-${Math.random()}`;
    const answers = await Promise.all(Array.from({ length: 5000 }, (_, i) => replicas[i % 3]!.rls.call(take(t, `req-${i}`), 30_000)));
    const ok = answers.flatMap((a, i) => (a.overall_code === 'OK' ? [i] : []));
    expect(ok.length).toBe(100);
    const refused = answers.find((a) => a.overall_code === 'OVER_LIMIT')!;
    expect([refused.statuses[0]!.limit_remaining, header(refused, 'Retry-After')]).toEqual([0, '1']);
    expect(JSON.parse(refused.raw_body.toString()).detail).toContain('100 requests at once');
    // Envoy's stream-done calls, to any replica: one slot each comes back, and one more request fits.
    const back = await replicas[1]!.rls.call(take(t, `req-${ok[0]}`, true));
    expect([back.overall_code, back.statuses[0]!.limit_remaining]).toEqual(['OK', 1]);
    expect((await replicas[2]!.rls.call(take(t, 'late-1'))).overall_code).toBe('OK');
    expect((await replicas[0]!.rls.call(take(t, 'late-2'))).overall_code).toBe('OVER_LIMIT');
    // The request id reaches Redis as a fingerprint only.
    expect(await redis.cli('--scan', '--pattern', '*req-*')).toBe('');
    // A give-back frees no window an over-limit cache could hold: nothing is announced to the other replicas.
    const publishes = async () => Number(/cmdstat_publish:calls=(\d+)/.exec(await redis.cli('INFO', 'commandstats'))?.[1] ?? 0);
    const published = await publishes();
    for (let i = 1; i < 4; i++) await replicas[i % 3]!.rls.call(take(t, `req-${ok[i]}`, true));
    expect(await publishes()).toBe(published);
    const { series } = await scrape(replicas[0]!.service.httpPort);
    expect(metric(series, 'tollgate_in_flight_slots_total', { domain: 'api', rule: 'tenant', event: 'taken' })).toBeGreaterThan(0);
  }, 60_000);
});

/** Envoy's two calls for one request under envoy/envoy-inflight.yaml, read from the file as Envoy builds
 * them (ratelimit.cc): the route's rate_limits without apply_on_stream_done at the request phase, those with
 * it when the stream is done (sent for a request Envoy refused too); each request_headers action an entry. */
function envoyCalls(headers: Record<string, string>): { request: RlsRequest; streamDone: RlsRequest } {
  const doc = parseYaml(readFileSync('envoy/envoy-inflight.yaml', 'utf8'));
  const route = doc.static_resources.listeners[0].filter_chains[0].filters[0].typed_config.route_config.virtual_hosts[0].routes[0];
  const limits: EnvoyRateLimit[] = route.typed_per_filter_config['envoy.filters.http.ratelimit'].rate_limits;
  const domain: string = doc.static_resources.listeners[0].filter_chains[0].filters[0].typed_config.http_filters[0].typed_config.domain;
  const call = (done: boolean): RlsRequest => ({
    domain,
    descriptors: limits
      .filter((l) => (l.apply_on_stream_done ?? false) === done)
      .map((l) => ({
        entries: l.actions.map((a) => ({ key: a.request_headers.descriptor_key, value: headers[a.request_headers.header_name]! })),
        ...(l.hits_addend && { hits_addend: { value: l.hits_addend.number }, is_negative_hits: l.hits_addend.is_negative_hits ?? false }),
      })),
  });
  return { request: call(false), streamDone: call(true) };
}
interface EnvoyRateLimit {
  actions: { request_headers: { header_name: string; descriptor_key: string } }[];
  hits_addend?: { number: number; is_negative_hits?: boolean };
  apply_on_stream_done?: boolean;
}

describe('the shipped example (envoy/envoy-inflight.yaml, examples/in-flight.yaml) through the service', () => {
  let s: TestService;
  beforeAll(async () => {
    s = await startTestService({ configDir: configDir({ 'in-flight.yaml': readFileSync('examples/in-flight.yaml', 'utf8') }) });
  });
  afterAll(() => s?.close());
  const request = (id: string) => envoyCalls({ 'x-tenant-id': 'acme', 'x-request-id': id });

  it('20 at once; refused requests ending give nothing back; one ending lets one in; a dead Envoy frees its slots after the lease', async () => {
    const first = await Promise.all(Array.from({ length: 25 }, (_, i) => s.rls.call(request(`r${i}`).request)));
    const ok = first.flatMap((a, i) => (a.overall_code === 'OK' ? [i] : []));
    expect(ok.length).toBe(20);
    // Envoy sends the stream-done call for the 5 it answered 429 too: none of them held a slot.
    const refused = first.flatMap((a, i) => (a.overall_code === 'OVER_LIMIT' ? [i] : []));
    for (const i of refused) expect((await s.rls.call(request(`r${i}`).streamDone)).overall_code).toBe('OK');
    expect((await s.rls.call(request('late').request)).overall_code).toBe('OVER_LIMIT');
    // One running request ends: exactly one more gets in.
    await s.rls.call(request(`r${ok[0]}`).streamDone);
    expect((await s.rls.call(request('next').request)).overall_code).toBe('OK');
    expect((await s.rls.call(request('next-2').request)).overall_code).toBe('OVER_LIMIT');
    // The Envoy holding the other 20 dies: its connection closes and no stream-done call comes. Nothing renews
    // their slots (in-flight-envoys.test.ts: renewals while an Envoy lives): they return after the lease (30s).
    s.rls.close();
    const other = new RlsClient(s.service.grpcPort);
    try {
      s.clock.advance(29_000);
      expect((await other.call(request('still-held').request)).overall_code).toBe('OVER_LIMIT');
      s.clock.advance(2_000);
      const after = await other.call(request('after-lease').request);
      expect([after.overall_code, after.statuses[0]!.limit_remaining]).toEqual(['OK', 19]);
    } finally {
      other.close();
    }
  });
});

describe('give-backs while Redis is frozen', () => {
  it('are kept and return their slots once it answers; a give-back sent twice returns one slot', async () => {
    const redis = await startRedis();
    const dir = configDir({ 'api.yaml': config.replace('limit: 100', 'limit: 5') });
    const args = ['--store', 'redis', '--redis-url', redis.url, '--redis-timeout-ms', '100', '--redis-failure', 'deny'];
    const s = await startTestService({ configDir: dir, args });
    try {
      const t = `t-${Math.random()}`;
      for (let i = 0; i < 5; i++) expect((await s.rls.call(take(t, `f-${i}`))).overall_code).toBe('OK');
      redis.signal('SIGSTOP');
      // Envoy's stream-done calls during the freeze (their answers are ignored); f-0's is sent twice.
      await Promise.allSettled(['f-0', 'f-0', 'f-1'].map((id) => s.rls.call(take(t, id, true))));
      expect(metric((await scrape(s.service.httpPort)).series, 'tollgate_settlements_waiting')).toBe(3);
      redis.signal('SIGCONT');
      await within(10_000, async () => metric((await scrape(s.service.httpPort)).series, 'tollgate_settlements_waiting') === 0, 'the queue sent');
      const admitted = await Promise.all(['n-0', 'n-1', 'n-2'].map((id) => s.rls.call(take(t, id))));
      expect(admitted.filter((a) => a.overall_code === 'OK').length).toBe(2);
    } finally {
      redis.signal('SIGCONT');
      await s.close();
      await redis.stop();
    }
  });
});

describe('the memory store holds slots only while they are held', () => {
  it('20,000 tenants that each take a slot and give it back leave no pool behind', async () => {
    const store = new MemoryStore({ clock: new ManualClock(T0) });
    for (let i = 0; i < 20_000; i++) {
      await store.check([slot(1, 'r', { key: `tenant:{t${i}}:slots`, windowMs: 86_400_000 })]);
      await store.check([slot(-1, 'r', { key: `tenant:{t${i}}:slots`, windowMs: 86_400_000 })]);
    }
    expect(store.slots.size).toEqual({ pools: 0, holders: 0 });
  });
});

describe('in_flight rules and the rest of a request', () => {
  const rules = `domain: api
descriptors:
  - key: tenant
    in_flight: {limit: 2, lease: 1m, request_key: request_id}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000}
`;
  let s: TestService;
  let q: TestService;
  beforeAll(async () => {
    const dir = configDir({ 'api.yaml': rules });
    [s, q] = await Promise.all([startTestService({ configDir: dir }), startTestService({ configDir: dir, args: ['--quota-mode', 'true'] })]);
  });
  afterAll(async () => {
    await Promise.all([s?.close(), q?.close()]);
  });
  const tenant = (t: string) => ({ entries: [{ key: 'tenant', value: t }] });

  it('without the request id a descriptor of a request_key rule only checks: it takes and frees nothing', async () => {
    const t = `t-${Math.random()}`;
    for (const id of ['v-0', 'v-1']) expect((await s.rls.call(take(t, id))).overall_code).toBe('OK');
    const back = await s.rls.call({ domain: 'api', descriptors: [{ ...tenant(t), hits_addend: { value: 2 }, is_negative_hits: true }] });
    expect(back.overall_code).toBe('OVER_LIMIT');
    expect((await s.rls.call(take(t, 'next'))).overall_code).toBe('OVER_LIMIT');
  });

  it('QUOTA_MODE leaves an in_flight rule as it is: a slot is held or it is not', async () => {
    const t = `t-${Math.random()}`;
    const both = (id: string): RlsRequest => ({ domain: 'api', descriptors: [...take(t, id).descriptors, { entries: [{ key: 'user', value: 'u' }] }] });
    const answers = await Promise.all(['a', 'b', 'c', 'd'].map((id) => q.rls.call(both(id))));
    expect(answers.filter((a) => a.overall_code === 'OK').length).toBe(2);
  });

  it("Envoy's per-descriptor limit does not replace an in_flight rule's slots", async () => {
    const t = `t-${Math.random()}`;
    const over = (id: string): RlsRequest => ({
      domain: 'api',
      descriptors: [{ ...take(t, id).descriptors[0]!, limit: { requests_per_unit: 100, unit: 'HOUR' } }],
    });
    const answers = await Promise.all(['a', 'b', 'c'].map((id) => s.rls.call(over(id))));
    expect(answers.filter((a) => a.overall_code === 'OK').length).toBe(2);
  });

  it('a refusal counts once in the metric, whatever hits it asked for', async () => {
    const t = `t-${Math.random()}`;
    const before =
      metric((await scrape(s.service.httpPort)).series, 'tollgate_in_flight_slots_total', { domain: 'api', rule: 'tenant', event: 'refused' }) ?? 0;
    const huge: RlsRequest = { domain: 'api', descriptors: [{ ...take(t, 'h').descriptors[0]!, hits_addend: { value: 4_294_967_295 } }] };
    expect((await s.rls.call(huge)).overall_code).toBe('OVER_LIMIT');
    const after = metric((await scrape(s.service.httpPort)).series, 'tollgate_in_flight_slots_total', { domain: 'api', rule: 'tenant', event: 'refused' });
    expect(after).toBe(before + 1);
  });
});

describe('a take in a request another descriptor refuses, through the limiter', () => {
  const { stores } = everyStore({ cluster: true });
  const config = compileSources([
    {
      file: 'k.yaml',
      text: [
        'domain: k',
        'descriptors:',
        '  - key: tenant',
        '    in_flight: {limit: 5, request_key: request_id}',
        '  - key: blocked',
        '    rate_limit: {unit: hour, requests_per_unit: 0}',
      ].join('\n'),
    },
  ]);
  it.each(stores)('%s: takes nothing, and says so (a Cluster asks each master first, then counts)', async (_name, make) => {
    const clock = new ManualClock(T0);
    const limiter = new Limiter({ config: () => config, store: await make(clock), clock });
    const descriptors = [
      {
        entries: [
          { key: 'tenant', value: 'acme' },
          { key: 'request_id', value: 'r1' },
        ],
      },
      { entries: [{ key: 'blocked', value: 'x' }] },
    ];
    const d = await limiter.decide({ domain: 'k', hits: 1, descriptors });
    expect([d.overLimit, d.descriptors[0]!.slots?.count ?? 0, d.descriptors[0]!.windows[0]!.remaining]).toEqual([true, 0, 5]);
    const alone = await limiter.decide({ domain: 'k', hits: 1, descriptors: [descriptors[0]!] });
    expect(alone.descriptors[0]!.windows[0]!.remaining).toBe(4);
  });
});
