import { copyFileSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SimEnvoy } from '../helpers/envoy-rlqs.js';
import { type Prometheus, startPrometheus } from '../helpers/prometheus.js';
import { type RedisServer, startRedis } from '../helpers/redis.js';
import { configDir, property, startTestService, type TestService } from '../helpers/service.js';
import { within } from '../helpers/time.js';

// A real Prometheus scrapes a real Tollgate (Redis store) under traffic, with the namespace and pod target labels
// the Prometheus Operator adds; every dashboard query that reads Tollgate's metrics must return data with the
// variables at "All" and at this target's values, and none for another pod. Envoy's panel is left out: no Envoy.

const dashboard = JSON.parse(readFileSync('deploy/grafana/dashboards/tollgate.json', 'utf8')) as {
  panels: { title: string; targets: { expr: string }[] }[];
};
const queries = dashboard.panels.flatMap((p) => p.targets.map((t) => ({ panel: p.title, expr: t.expr }))).filter((q) => q.expr.includes('tollgate_'));
const TARGET = { namespace: 'tollgate-test', pod: 'tollgate-0' };

/** The query as Grafana sends it: each variable replaced by its value (All: the variables' allValue, `.*`). */
function withVariables(expr: string, values: { namespace: string; pod: string; domain: string }): string {
  return expr.replaceAll('$namespace', values.namespace).replaceAll('$pod', values.pod).replaceAll('$domain', values.domain);
}
const ALL = { namespace: '.*', pod: '.*', domain: '.*' };
const CHOSEN = { ...TARGET, domain: '(property-api|trial)' }; // Grafana's regex form of a multi-value selection

const SHADOW = `
domain: trial
descriptors:
  - key: client
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1, name: trial}
  - key: job
    in_flight: {limit: 10, request_key: request_id}
  - key: lost
    in_flight: {limit: 1, lease: 1s, request_key: request_id}
  - key: stream
    in_flight: {limit: 5, lease: 3s, max_hold: 5m, request_key: request_id}
  - key: spend
    charge_mode: true
    reservation_key: request_id
    settlement_key: settle_id
    rate_limit: {unit: hour, requests_per_unit: 100000000}
`;

describe('Grafana dashboard against a real Prometheus', () => {
  let redis: RedisServer;
  let t: TestService;
  let prometheus: Prometheus;
  let traffic: Promise<void>;
  let running = true;
  let envoy: SimEnvoy;

  beforeAll(async () => {
    redis = await startRedis();
    const dir = configDir({ 'trial.yaml': SHADOW });
    copyFileSync('config/property-api.yaml', join(dir, 'property-api.yaml'));
    t = await startTestService({ configDir: dir, realClock: true, args: ['--store', 'redis', '--redis-url', redis.url, '--redis-timeout-ms', '1000'] });
    prometheus = await startPrometheus([`127.0.0.1:${t.service.httpPort}`], TARGET);
    // An Envoy on the RLQS stream too, reporting every second, for the RLQS panels.
    envoy = new SimEnvoy({ ports: [t.service.grpcPort], localAddress: '127.0.0.90', domain: 'property-api', reportIntervalMs: 1000 });
    // Long streams, never given back while the test runs: renewed every second on the client's connection.
    for (const id of ['s-1', 's-2']) {
      const stream = [
        { key: 'stream', value: 's' },
        { key: 'request_id', value: id },
      ];
      await t.rls.call({ domain: 'trial', descriptors: [{ entries: stream }] });
    }
    // Bounded traffic until the test ends: over-limit reads (cache hits), near-limit writes, shadow rejections.
    traffic = (async () => {
      for (let i = 0; running && i < 20_000; i++) {
        await t.rls.call(property('read', 'Bearer hammer'));
        await t.rls.call(property('write', `Bearer writer-${Math.floor(i / 6)}`));
        await t.rls.call({ domain: 'trial', descriptors: [{ entries: [{ key: 'client', value: 'c' }] }] });
        // A refund of every fourth call (Envoy 1.38's is_negative_hits: the rest still go past the shadow
        // limit), and a job taking a slot and giving it back.
        if (i % 4 === 0) {
          await t.rls.call({ domain: 'trial', descriptors: [{ entries: [{ key: 'client', value: 'c' }], hits_addend: { value: 1 }, is_negative_hits: true }] });
        }
        const job = [
          { key: 'job', value: 'j' },
          { key: 'request_id', value: `r-${i}` },
        ];
        await t.rls.call({ domain: 'trial', descriptors: [{ entries: job }] });
        await t.rls.call({ domain: 'trial', descriptors: [{ entries: job, hits_addend: { value: 1 }, is_negative_hits: true }] });
        // Slots never given back (their Envoy gone): one held a second, the rest refused meanwhile, then expired.
        if (i % 10 === 0) {
          const lost = [
            { key: 'lost', value: 'l' },
            { key: 'request_id', value: `l-${i}` },
          ];
          await t.rls.call({ domain: 'trial', descriptors: [{ entries: lost }] });
        }
        // A budget: a reservation of 10 at the request phase, settled at 8 when the stream is done.
        const spend = (key: string, hits: number) => ({
          domain: 'trial',
          descriptors: [
            {
              entries: [
                { key: 'spend', value: 's' },
                { key, value: `q-${i}` },
              ],
              hits_addend: { value: hits },
            },
          ],
        });
        await t.rls.call(spend('request_id', 10));
        await t.rls.call(spend('settle_id', 8));
        envoy.request({ category: 'reports', token: 'Bearer rlqs' });
        // Pacing, not a wait for a condition: a modest rate that lasts the whole test, rather than its
        // 20,000 rounds at full speed on the CPU Prometheus and the service share.
        if (i % 50 === 0) await new Promise((r) => setTimeout(r, 20));
      }
    })();
    // rate() needs two samples of every series: wait for a few scrapes.
    // The slots back by lease come a lease after the first take: their series too.
    await within(30_000, async () => {
      const samples = async (expr: string) =>
        ((await prometheus.query(`count_over_time(${expr}[1m])`)).data.result as { value: [number, string] }[]).map((x) => Number(x.value[1]));
      const requests = await samples('tollgate_requests_total');
      const expired = await samples('tollgate_in_flight_slots_total{event="expired"}');
      // The census runs every 10 s: its gauges, and the renewals' counter, need two samples too.
      const held = await samples('tollgate_in_flight_held');
      const renewed = await samples('tollgate_in_flight_renewals_total');
      const twice = (xs: number[]) => xs.length > 0 && Math.min(...xs) >= 2;
      return twice(requests) && Math.min(...requests) >= 3 && twice(expired) && twice(held) && twice(renewed);
    });
  }, 60_000);

  afterAll(async () => {
    running = false;
    await traffic;
    envoy?.close();
    await prometheus?.stop();
    await t?.close();
    await redis?.stop();
  });

  it('has Tollgate queries for every panel but the Envoy one', () => {
    expect(new Set(queries.map((q) => q.panel)).size).toBe(dashboard.panels.length - 1);
    expect(queries.length).toBeGreaterThanOrEqual(12);
  });

  it.each(queries.map((q) => [q.panel, q.expr]))('%s: %s', async (_panel, expr) => {
    for (const values of [ALL, CHOSEN]) {
      const r = await prometheus.query(withVariables(expr, values));
      expect(r.status, JSON.stringify(values)).toBe('success');
      expect(r.data.result.length, JSON.stringify(values)).toBeGreaterThan(0);
    }
    const other = await prometheus.query(withVariables(expr, { ...CHOSEN, pod: 'tollgate-other' }));
    expect(other.data.result).toEqual([]);
  });

  it("the variables' label_values queries offer this target's namespace, pod and domains", async () => {
    const values = async (expr: string, label: string): Promise<string[]> =>
      ((await prometheus.query(expr)).data.result as { metric: Record<string, string> }[]).map((r) => r.metric[label]!);
    // label_values(metric{selector}, label) is the label's values among the series the selector matches.
    expect(await values('count by (namespace) (tollgate_build_info)', 'namespace')).toEqual([TARGET.namespace]);
    expect(await values(`count by (pod) (tollgate_build_info{namespace=~"${TARGET.namespace}"})`, 'pod')).toEqual([TARGET.pod]);
    expect((await values(`count by (domain) (tollgate_requests_total{namespace=~"${TARGET.namespace}"})`, 'domain')).sort()).toEqual(['property-api', 'trial']);
  });
});
