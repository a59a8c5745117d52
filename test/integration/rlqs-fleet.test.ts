import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { offer, SimEnvoy } from '../helpers/envoy-rlqs.js';
import { type Daemon, freePort, loopback, startCli } from '../helpers/process.js';
import { type RedisServer, startRedis } from '../helpers/redis.js';
import { bounded } from '../helpers/time.js';

// RLQS across a fleet: two Tollgate processes sharing one redis-server, simulated Envoys (each from its own
// loopback address, as pods have their own IPs) spread over them. Reports every second (Envoy's 5 s scaled
// down: every duration of the service follows RLQS_REPORT_INTERVAL). tenant: 100 requests a second in all.

const LIMIT = 100;
let redis: RedisServer;
const replicas: { daemon: Daemon; port: number }[] = [];
const sims: SimEnvoy[] = [];

async function replica(workers = 1): Promise<{ daemon: Daemon; port: number }> {
  const [port, http] = [await freePort(), await freePort()];
  const args = ['serve', '--store', 'redis', '--redis-url', redis.url, '--config', 'test/fixtures/rlqs', '--rlqs-report-interval', '1s'];
  const serving = workers > 1 ? /tollgate serving[\s\S]*tollgate serving/ : /tollgate serving/;
  const daemon = await startCli([...args, '--workers', String(workers), ...loopback(port, http)], serving);
  return { daemon, port };
}

function sim(n: number, ports: number[]): SimEnvoy {
  const s = new SimEnvoy({ ports, localAddress: `127.0.0.${n}`, domain: 'rlqs-test', reportIntervalMs: 1000 });
  sims.push(s);
  return s;
}

beforeAll(async () => {
  redis = await startRedis();
  replicas.push(await replica(), await replica());
});
afterAll(async () => {
  for (const s of sims) s.close();
  for (const r of replicas) {
    if (r.daemon.child.exitCode === null) {
      r.daemon.child.kill('SIGTERM');
      await bounded(r.daemon.exited, 15_000, 'replica stopped');
    }
  }
  await redis?.stop();
});

describe('RLQS over two replicas sharing Redis', () => {
  it('holds the fleet to the limit once converged, and serves an instance under its fair share', async () => {
    const [a, b] = replicas.map((r) => r.port) as [number, number];
    const busy = [sim(10, [a]), sim(11, [a]), sim(12, [b])];
    const small = sim(13, [b]);
    const load = [...busy.map((s) => ({ sim: s, id: { tenant: 'fleet' }, rate: 120 })), { sim: small, id: { tenant: 'fleet' }, rate: 15 }];
    await offer(load, 2000); // converging: first reports, first shares
    const ms = 2000;
    const admitted = await offer(load, ms);
    const fleetRate = (admitted.reduce((x, y) => x + y, 0) * 1000) / ms;
    // 375 offered a second against a limit of 100.
    expect(fleetRate).toBeGreaterThanOrEqual(0.75 * LIMIT);
    expect(fleetRate).toBeLessThanOrEqual(1.15 * LIMIT);
    // The small instance asks for 15 a second, under its fair share (25): it is served (at least 80 %).
    expect((admitted[3]! * 1000) / ms).toBeGreaterThanOrEqual(0.8 * 15);
  });

  it('when instances join, the rates in force never sum past the limit and its headroom pool: the others shrink first', async () => {
    const [a, b] = replicas.map((r) => r.port) as [number, number];
    const id = { tenant: 'joining' };
    const first = [sim(40, [a]), sim(41, [b]), sim(42, [a])].map((s) => ({ sim: s, id, rate: 80 }));
    await offer(first, 2000);
    const joining = [sim(43, [b]), sim(44, [a]), sim(45, [b])].map((s) => ({ sim: s, id, rate: 80 }));
    const all = [...first, ...joining];
    let most = 0;
    const sample = setInterval(() => {
      most = Math.max(
        most,
        all.reduce((sum, l) => sum + l.sim.rateInForce(id), 0),
      );
    }, 5);
    await offer(all, 500); // the join: newcomers admitted before their first answer, the others shrinking
    const admitted = await offer(all, 1200);
    clearInterval(sample);
    // Every newcomer holds a share well before its next report, and the fleet is back at the limit.
    for (const { sim: s } of joining) expect(s.rateInForce(id)).toBeGreaterThan(0);
    // The grants may use the headroom pool (a tenth of the limit) while the others shrink: never more.
    expect(most).toBeLessThanOrEqual(1.1 * LIMIT);
    expect((admitted.reduce((x, y) => x + y, 0) * 1000) / 1200).toBeLessThanOrEqual(1.15 * LIMIT);
  });

  it('holds instances spread over the workers of one replica (--workers 2) and a second replica to one limit', async () => {
    const workers = await replica(2);
    replicas.push(workers);
    const [a] = replicas.map((r) => r.port) as [number];
    // One connection each: node:cluster hands them to either worker in turn.
    const spread = [sim(30, [workers.port]), sim(31, [workers.port]), sim(32, [workers.port]), sim(33, [a])];
    const load = spread.map((s) => ({ sim: s, id: { tenant: 'workers' }, rate: 60 }));
    await offer(load, 2000);
    const ms = 2000;
    const admitted = await offer(load, ms);
    const fleetRate = (admitted.reduce((x, y) => x + y, 0) * 1000) / ms;
    expect(fleetRate).toBeGreaterThanOrEqual(0.75 * LIMIT);
    expect(fleetRate).toBeLessThanOrEqual(1.15 * LIMIT);
  });

  it("moves a dead replica's instances to the other without a gap in their assignments", async () => {
    const [a, b] = replicas.map((r) => r.port) as [number, number];
    const moving = [sim(20, [a, b]), sim(21, [a, b])];
    const load = moving.map((s) => ({ sim: s, id: { tenant: 'failover' }, rate: 150 }));
    await offer(load, 2000);
    const before = moving.map((s) => s.received.length);
    replicas[0]!.daemon.child.kill('SIGKILL');
    const admitted = await offer(load, 3500);
    // Each reconnected (to the other replica) and kept being assigned; no assignment ran out meanwhile.
    for (const [i, s] of moving.entries()) expect(s.received.length).toBeGreaterThan(before[i]! + 2);
    expect(moving.map((s) => s.expirations)).toEqual([0, 0]);
    // Still one limit for both: what the two admitted over 3.5 s, the failover included.
    const rate = (admitted[0]! + admitted[1]!) / 3.5;
    expect(rate).toBeGreaterThanOrEqual(0.75 * LIMIT);
    expect(rate).toBeLessThanOrEqual(1.15 * LIMIT);
  });
});
