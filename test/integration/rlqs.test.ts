import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fingerprint } from '../../src/fingerprint.js';
import { offer, SimEnvoy } from '../helpers/envoy-rlqs.js';
import { startTestService, type TestService } from '../helpers/service.js';
import { within } from '../helpers/time.js';

// The Rate Limit Quota Service against simulated Envoys (test/helpers/envoy-rlqs.ts) over real HTTP/2 streams,
// one replica with the memory store. Reports every second (RLQS_REPORT_INTERVAL=1s) so a test converges in
// seconds; Envoy's own interval is 5 s, and every duration here scales with it.

const ARGS = ['--config', 'test/fixtures/rlqs', '--rlqs-report-interval', '1s'];
let t: TestService;
const sims: SimEnvoy[] = [];
const sim = (n: number): SimEnvoy => {
  const s = new SimEnvoy({ ports: [t.service.grpcPort], localAddress: `127.0.0.${n}`, domain: 'rlqs-test', reportIntervalMs: 1000 });
  sims.push(s);
  return s;
};

beforeAll(async () => {
  t = await startTestService({ args: ARGS, realClock: true });
});
afterAll(async () => {
  for (const s of sims) s.close();
  await t.close();
});

// biome-ignore lint/suspicious/noExplicitAny: decoded responses
const actions = (s: SimEnvoy): any[] => s.received.flatMap((m: any) => m.bucket_action ?? []);

describe('RateLimitQuotaService/StreamRateLimitQuotas', () => {
  it('ends its streams with OK when the service stops, without waiting for the shutdown timeout', async () => {
    const other = await startTestService({ args: [...ARGS, '--shutdown-timeout-ms', '20000'], realClock: true });
    const s = new SimEnvoy({ ports: [other.service.grpcPort], localAddress: '127.0.0.9', domain: 'rlqs-test', reportIntervalMs: 60_000 });
    s.request({ tenant: 'stopping' });
    await within(5000, () => actions(s).length > 0, 'an assignment');
    const start = Date.now();
    await other.close();
    expect(Date.now() - start).toBeLessThan(5000);
    await within(5000, () => s.statuses.length > 0, 'a status');
    expect(s.statuses).toEqual(['0']);
    s.close();
  });

  it("answers a new bucket's first report with a token bucket of the rule's rate, a burst of a tenth of an interval, a whole-second TTL", async () => {
    const s = sim(2);
    s.request({ tenant: 'acme' });
    await within(5000, () => actions(s).length > 0, 'an assignment');
    const [a] = actions(s);
    expect(a.bucket_id.bucket).toEqual({ tenant: 'acme' });
    expect(a.quota_assignment_action.assignment_time_to_live).toEqual({ seconds: 3 });
    // Alone, the instance may take the whole 100/s, refilled every second; its burst is a tenth of a report
    // interval (1 s here) of the rate: a changed bucket may start full (Envoy releases differ).
    const first = {
      max_tokens: 10,
      tokens_per_fill: { value: 100 },
      fill_interval: { seconds: 1, nanos: 1 },
    };
    expect(a.quota_assignment_action.rate_limit_strategy.token_bucket).toEqual(first);
    // The next report keeps the same bucket: nothing changed that is worth a refill.
    await within(5000, () => actions(s).length > 1, 'the next assignment');
    expect(actions(s)[1].quota_assignment_action.rate_limit_strategy.token_bucket).toEqual(first);
  });

  it('ends a stream whose x-tollgate-instance header is not a name with INVALID_ARGUMENT, its text never echoed', async () => {
    const name = `secret-${'n'.repeat(200)}`;
    const s = new SimEnvoy({ ports: [t.service.grpcPort], localAddress: '127.0.0.30', domain: 'rlqs-test', reportIntervalMs: 1000, instanceName: name });
    sims.push(s);
    s.request({ tenant: 'named' });
    await within(5000, () => s.statuses.length > 0, 'a status');
    expect(s.statuses).toEqual(['3']);
    expect(s.messages[0]).toMatch(/x-tollgate-instance is 207 bytes/);
    expect(s.messages[0]).not.toContain('secret');
    // A good name is served.
    const named = new SimEnvoy({
      ports: [t.service.grpcPort],
      localAddress: '127.0.0.31',
      domain: 'rlqs-test',
      reportIntervalMs: 1000,
      instanceName: 'pod-7f9c',
    });
    sims.push(named);
    named.request({ tenant: 'named' });
    await within(5000, () => actions(named).length > 0, 'an assignment');
    expect(named.statuses).toEqual([]);
  });

  it('sends ALLOW_ALL as a set oneof for a bucket no rule matches, and for a shadow rule', async () => {
    const s = sim(3);
    s.request({ nobody: 'x' });
    s.request({ watched: 'y' });
    await within(5000, () => actions(s).length >= 2, 'two assignments');
    for (const a of actions(s)) {
      const strategy = a.quota_assignment_action.rate_limit_strategy;
      expect(strategy.strategy).toBe('blanket_rule');
      expect(strategy.blanket_rule ?? 0).toBe(0);
    }
  });

  it('refuses a bucket outright once its hourly quota is spent, on the counters RLS decisions use', async () => {
    const s = sim(5);
    const hourly = { hourly: `h-${Date.now()}` };
    const denied = (): boolean => actions(s).at(-1)?.quota_assignment_action?.rate_limit_strategy?.blanket_rule === 1; // DENY_ALL
    // One request first, and its assignment: the load starts from the bucket's assignment, not from Envoy's
    // ALLOW_ALL before any (which a busy machine can stretch past a report interval).
    let admitted = s.request(hourly) ? 1 : 0;
    await within(5000, () => actions(s).length > 0, 'an assignment');
    for (let i = 0; i < 12 && !denied(); i++) admitted += (await offer([{ sim: s, id: hourly, rate: 40 }], 1000))[0]!;
    expect(denied()).toBe(true);
    // 60 an hour, at 40 a second offered: the shares shrink as the quota runs out, so the fleet never spends
    // more than one report's worth past it.
    expect(admitted).toBeGreaterThanOrEqual(50);
    expect(admitted).toBeLessThanOrEqual(60 * 1.15);
    expect((await offer([{ sim: s, id: hourly, rate: 40 }], 1000))[0]).toBe(0);
    // RLS counts on the same hourly counter: it is spent there too.
    const res = await t.rls.call({ domain: 'rlqs-test', descriptors: [{ entries: [{ key: 'hourly', value: hourly.hourly }] }] });
    expect(res.overall_code).toBe('OVER_LIMIT');
    expect(res.statuses[0]!.current_limit!.name).toBe('hourly-per-hour');
  });

  it('splits one grant among the buckets of an instance that count on one counter (a shared wildcard)', async () => {
    const [one, two] = [sim(6), sim(7)];
    const files = (p: string) => ({ path: `files/${p}` });
    const load = [
      { sim: one, id: files('a'), rate: 150 },
      { sim: one, id: files('b'), rate: 150 },
      { sim: two, id: files('c'), rate: 150 },
    ];
    await offer(load, 2500);
    // Three Envoy buckets, one counter of 100/s: the rates in force sum to at most 100, each instance about half.
    const rates = load.map((l) => l.sim.rateInForce(l.id));
    expect(rates.reduce((a, b) => a + b, 0)).toBeLessThanOrEqual(100);
    expect(rates[0]! + rates[1]!).toBeGreaterThan(30);
    expect(rates[2]).toBeGreaterThan(30);
  });

  it("follows a client's tier changed at run time at the bucket's next report, as RLS does", async () => {
    const s = sim(8);
    const id = { tenant: 'moving-up' };
    await offer([{ sim: s, id, rate: 50 }], 1500);
    expect(s.rateInForce(id)).toBe(100);
    await t.service.tiers.assign({ fingerprint: fingerprint('moving-up'), tier: 'big', assignedAt: new Date().toISOString(), by: 'test' });
    await offer([{ sim: s, id, rate: 50 }], 2200);
    expect(s.rateInForce(id)).toBe(300);
  });

  it('leaves RLS its room on a per-second window they share: RLS and RLQS together admit the limit, not twice it', async () => {
    const s = sim(12);
    const id = { tenant: 'both-ways' };
    // 60 RLS calls a second (under the 100/s limit: all admitted) beside an Envoy offering 100/s through RLQS.
    let rls = 0;
    let refused = 0;
    let counting = false;
    const rlsLoad = setInterval(() => {
      t.rls.call({ domain: 'rlqs-test', descriptors: [{ entries: [{ key: 'tenant', value: 'both-ways' }] }] }).then(
        (res) => {
          if (counting && res.overall_code === 'OK') rls++;
          if (res.overall_code !== 'OK') refused++;
        },
        () => undefined,
      );
    }, 1000 / 60);
    try {
      await offer([{ sim: s, id, rate: 100 }], 2500); // RLQS learns what RLS takes at its reports
      counting = true;
      const ms = 3000;
      const [rlqs] = await offer([{ sim: s, id, rate: 100 }], ms);
      counting = false;
      const rate = (n: number): number => (n * 1000) / ms;
      // Before, RLQS granted the whole 100/s beside RLS's calls: 148/s through one 100/s limit (RLS 48, RLQS 100 on
      // a busy machine). Now RLQS leaves what RLS took over the last second, re-read at each report: 113 measured,
      // RLS's rate moving between reports.
      expect(rate(rls) + rate(rlqs!)).toBeLessThanOrEqual(125);
      expect(refused).toBe(0); // RLS, under the limit, is never refused for room RLQS holds
      // RLQS's grant leaves RLS room (what RLS took over the last second, however many calls this machine sent).
      expect(s.rateInForce(id)).toBeLessThan(100 - rate(rls) / 2);
    } finally {
      clearInterval(rlsLoad);
    }
  });

  it('holds one instance to the limit it enforces locally', async () => {
    const s = sim(4);
    const [admitted] = await offer([{ sim: s, id: { tenant: 'solo' }, rate: 300 }], 2000);
    // 100/s for 2 s, plus the first full bucket; never the 300/s offered.
    expect(admitted).toBeGreaterThan(150);
    expect(admitted).toBeLessThan(330);
  });
});
