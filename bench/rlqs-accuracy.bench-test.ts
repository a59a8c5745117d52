import { afterAll, beforeAll, it } from 'vitest';
import { offer, type SimEnvoy, SimEnvoy as Sim } from '../test/helpers/envoy-rlqs.js';
import { type RedisServer, startRedis } from '../test/helpers/redis.js';
import { startTestService, type TestService } from '../test/helpers/service.js';

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
