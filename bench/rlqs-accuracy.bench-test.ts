import { afterAll, beforeAll, it } from 'vitest';
import { storeKey } from '../src/counters/keys.js';
import { RedisShareStore } from '../src/rlqs/shares/redis-share-store.js';
import { parseRedisUrl } from '../src/store/redis-connection.js';
import { RedisStore } from '../src/store/redis-store.js';
import { offer, type SimEnvoy, SimEnvoy as Sim } from '../test/helpers/envoy-rlqs.js';
import { type RedisServer, startRedis } from '../test/helpers/redis.js';
import { runScenario, type ScenarioResult } from '../test/helpers/rlqs-scenario.js';
import { silentLogger, startTestService, type TestService } from '../test/helpers/service.js';

// How close RLQS holds a fleet of simulated Envoys (test/helpers/envoy-rlqs.ts, faithful to Envoy's filter) to a
// limit: two replicas sharing one redis-server, instances spread over them, each from its own loopback address.
// Prints a table (docs/rlqs.md "Accuracy" and BENCHMARKS.md quote it). tenant: 100 requests a second.

const LIMIT = 100;
let redis: RedisServer;
const replicas: Record<number, TestService[]> = {};
const sims: SimEnvoy[] = [];
let next = 2;

async function fleet(intervalS: number): Promise<TestService[]> {
  if (replicas[intervalS]) return replicas[intervalS]!;
  const args = ['--store', 'redis', '--redis-url', redis.url, '--config', 'test/fixtures/rlqs', '--rlqs-report-interval', `${intervalS}s`];
  replicas[intervalS] = [await startTestService({ args, realClock: true }), await startTestService({ args, realClock: true })];
  return replicas[intervalS]!;
}

function instances(n: number, services: TestService[], intervalS: number): SimEnvoy[] {
  return Array.from({ length: n }, (_, i) => {
    const s = new Sim({
      ports: [services[i % services.length]!.service.grpcPort],
      localAddress: `127.0.${Math.floor(next / 250)}.${2 + (next++ % 250)}`,
      domain: 'rlqs-test',
      reportIntervalMs: intervalS * 1000,
    });
    sims.push(s);
    return s;
  });
}

const rate = (admitted: number[], ms: number): number => (admitted.reduce((a, b) => a + b, 0) * 1000) / ms;
const rows: string[] = [];

beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  // What RLQS cost Redis over every scenario: script calls (quota-share.lua, a report's buckets a few calls at a
  // time, and check-and-incr.lua reading what RLS admitted on each per-second window) and pub/sub messages.
  const stats = await redis.cli('INFO', 'commandstats');
  for (const cmd of ['evalsha', 'publish']) {
    const m = new RegExp(`cmdstat_${cmd}:calls=(\\d+),usec=(\\d+),usec_per_call=([\\d.]+)`).exec(stats);
    if (m) rows.push(`| redis-server ${cmd.toUpperCase()} | ${m[1]} calls, ${m[3]} µs each |`);
  }
  for (const s of sims) s.close();
  for (const list of Object.values(replicas)) for (const t of list) await t.close();
  await redis.stop();
  process.stdout.write(`\n| scenario | result |\n|---|---|\n${rows.join('\n')}\n`);
});

it('converged, 3x the limit offered, by fleet size and report interval', async () => {
  for (const [n, intervalS] of [
    [2, 1],
    [8, 1],
    [32, 1],
    [8, 2],
  ] as const) {
    const services = await fleet(intervalS);
    const id = { tenant: `converged-${n}-${intervalS}` };
    const load = instances(n, services, intervalS).map((sim) => ({ sim, id, rate: (3 * LIMIT) / n }));
    await offer(load, 3000 * intervalS);
    const ms = 5000 * intervalS;
    rows.push(`| ${n} instances, I = ${intervalS} s, converged | ${(rate(await offer(load, ms), ms) / LIMIT).toFixed(3)} L |`);
  }
});

it('an instance under its fair share among 7 busy ones', async () => {
  const services = await fleet(1);
  const id = { tenant: 'skewed' };
  const [small, ...busy] = instances(8, services, 1);
  const load = [{ sim: small!, id, rate: 5 }, ...busy.map((sim) => ({ sim, id, rate: 60 }))];
  await offer(load, 3000);
  const ms = 5000;
  const admitted = await offer(load, ms);
  const served = (((admitted[0]! * 1000) / ms / 5) * 100).toFixed(0);
  rows.push(`| 8 instances, one offering 5/s | fleet ${(rate(admitted, ms) / LIMIT).toFixed(3)} L; the small one served ${served} % |`);
});

it('4 busy instances converged, then 4 more join: the fleet per half second', async () => {
  const services = await fleet(1);
  const id = { tenant: 'joining' };
  const first = instances(4, services, 1).map((sim) => ({ sim, id, rate: 75 }));
  await offer(first, 4000);
  const all = [...first, ...instances(4, services, 1).map((sim) => ({ sim, id, rate: 75 }))];
  const slots: number[] = [];
  for (let i = 0; i < 8; i++) slots.push(rate(await offer(all, 500), 500) / LIMIT);
  rows.push(`| 4 + 4 joining, I = 1 s, per 0.5 s after the join | ${slots.map((x) => x.toFixed(2)).join(', ')} (L) |`);
});

/** Redis's own CPU (user + sys, µs) and its EVALSHA calls and µs, read from INFO. */
async function redisCost(): Promise<{ cpuUs: number; evalCalls: number; evalUs: number }> {
  const cpu = await redis.cli('INFO', 'cpu');
  const used = (name: string): number => Number(new RegExp(`${name}:([\\d.]+)`).exec(cpu)?.[1] ?? 0) * 1e6;
  const stats = await redis.cli('INFO', 'commandstats');
  const m = /cmdstat_evalsha:calls=(\d+),usec=(\d+)/.exec(stats);
  return { cpuUs: used('used_cpu_user') + used('used_cpu_sys'), evalCalls: Number(m?.[1] ?? 0), evalUs: Number(m?.[2] ?? 0) };
}

const row = (n: number, r: ScenarioResult, reading: string): string =>
  `| ${n} instances, I = 5 s, skewed 3.6 L shifting at 35 s, changed bucket ${reading} | per 5 s: ${r.windows.map((x) => x.toFixed(2)).join(' ')} L; ` +
  `steady ${Math.min(...r.steady).toFixed(2)}-${Math.max(...r.steady).toFixed(2)} L; under fair share served ${(r.underServed * 100).toFixed(1)} %; ` +
  `${r.changesPerInstance.toFixed(1)} bucket changes and ${r.actionsPerInstance.toFixed(0)} actions per instance |`;

it("issue 40's fleet: 20 and 100 instances, Envoy's 5 s reports, both readings of a changed bucket", async () => {
  const services = await fleet(5);
  const ports = services.map((t) => t.service.grpcPort);
  for (const n of [20, 100] as const) {
    const before = await redisCost();
    const results = await Promise.all(
      (['share', 'full'] as const).map((changedBucket, i) =>
        runScenario({
          ...{ ports, net: 10 + n / 20 + i * 10, instances: n, limit: LIMIT, intervalMs: 5000, changedBucket },
          id: { tenant: `fleet-${n}-${changedBucket}` },
        }),
      ),
    );
    const after = await redisCost();
    rows.push(row(n, results[0]!, 'at its share'), row(n, results[1]!, 'full'));
    const reports = 2 * n * 13;
    rows.push(
      `| ${n} instances: Redis per report (both runs) | ${((after.cpuUs - before.cpuUs) / reports).toFixed(0)} µs of redis-server CPU, ` +
        `${((after.evalUs - before.evalUs) / reports).toFixed(0)} µs in scripts, ${((after.evalCalls - before.evalCalls) / reports).toFixed(2)} script calls |`,
    );
  }
}, 400_000);

it('quota-share.lua per call, steady reports, one bucket of 8 and of 128 instances (median of 3 alternating rounds)', async () => {
  const counters = new RedisStore({ connection: parseRedisUrl(redis.url, 'single'), timeoutMs: 1000, keyPrefix: 'bench:', logger: silentLogger });
  await counters.waitReady(5000);
  const store = new RedisShareStore(counters, (k) => storeKey('bench:', k), 5000);
  const ask = (key: string, i: number) => ({
    ...{ key, instance: `i${i}`, demand: 10 + (i % 7), capacity: 1000 },
    ...{ ttlMs: 60_000, running: 0, rebuildMs: 0, intervalMs: 5000 },
  });
  const perCall: Record<number, number[]> = { 8: [], 128: [] };
  for (const n of [8, 128]) for (let i = 0; i < n; i++) await store.reserve([ask(`lua-${n}:rlqs`, i)], Date.now());
  for (let round = 0; round < 3; round++)
    for (const n of [8, 128]) {
      const before = await redisCost();
      // 1,024 calls, instance by instance as their reports come: every table re-plans once per second of them.
      for (let c = 0; c < 1024; c++) await store.reserve([ask(`lua-${n}:rlqs`, c % n)], Date.now());
      const after = await redisCost();
      perCall[n]!.push((after.evalUs - before.evalUs) / (after.evalCalls - before.evalCalls));
    }
  await counters.close();
  const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[1]!;
  rows.push(`| quota-share.lua per call, 8 instances a bucket | ${median(perCall[8]!).toFixed(1)} µs |`);
  const [eight, many] = [median(perCall[8]!), median(perCall[128]!)];
  rows.push(`| quota-share.lua per call, 128 instances a bucket | ${many.toFixed(1)} µs (${(many / eight).toFixed(2)}× the 8) |`);
});
