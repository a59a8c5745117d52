import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Daemon, freePort, loopback, startCli } from '../helpers/process.js';
import { type RedisServer, startRedis } from '../helpers/redis.js';
import { runScenario } from '../helpers/rlqs-scenario.js';
import { bounded } from '../helpers/time.js';

// Issue 40: how close RLQS holds 20 Envoys with skewed demand that shifts mid-run to the limit, over two replicas
// sharing one redis-server, under both readings of Envoy's changed token bucket (at the old one's share of
// remaining tokens, or full: releases differ). Reports every second (Envoy's 5 s scaled down; `npm run bench:rlqs`
// runs the same scenario at 5 s and with 100 instances). Each reading's scenario has a bucket of its own.
// The bound of 1.15 L an interval is on what the assignments let through: before its first answer an instance
// admits by Envoy's no-assignment behaviour (ALLOW_ALL, docs/rlqs.md "Accuracy"), which in a fleet started at
// once is worth a share of the first interval that grows with the machine's load (20 streams opened and answered
// by cold processes: 0.1-0.3 s on this 2-core machine), five times as much of a 1 s interval as of Envoy's 5 s.
// Every instance must have its first answer within the first two intervals (a stream that failed before its
// first answer is opened again at the next report, as Envoy does).

/** The fixture's `fleet` rule: with reports every second, 1,000 a second keeps whole tokens from dominating, as
 * Envoy's 5 s interval does for a few hundred. */
const LIMIT = 1000;
const INTERVAL_MS = 1000;
let redis: RedisServer;
const replicas: Daemon[] = [];
const ports: number[] = [];

beforeAll(async () => {
  redis = await startRedis();
  for (let i = 0; i < 2; i++) {
    const [port, http] = [await freePort(), await freePort()];
    const args = ['serve', '--store', 'redis', '--redis-url', redis.url, '--config', 'test/fixtures/rlqs', '--rlqs-report-interval', '1s'];
    replicas.push(await startCli([...args, ...loopback(port, http)], /tollgate serving/));
    ports.push(port);
  }
});
afterAll(async () => {
  for (const d of replicas) {
    if (d.child.exitCode !== null) continue;
    d.child.kill('SIGTERM');
    await bounded(d.exited, 15_000, 'replica stopped');
  }
  await redis?.stop();
});

describe('20 instances, 3.6 L of skewed demand that shifts mid-run, over two replicas', () => {
  it('admit the limit over the steady intervals, at most 1.15 L an interval by assignments, serving those under their share', async () => {
    const [share, full] = await Promise.all(
      (['share', 'full'] as const).map((changedBucket, i) =>
        runScenario({ ports, net: 1 + i, instances: 20, limit: LIMIT, intervalMs: INTERVAL_MS, changedBucket, id: { fleet: `accuracy-${changedBucket}` } }),
      ),
    );
    for (const r of [share!, full!]) {
      const shown = `${r.windows.map((x) => x.toFixed(2)).join(' ')}; assigned ${r.assignedWindows.map((x) => x.toFixed(2)).join(' ')}`;
      // The limit held over the run: what the steady intervals admitted in all, within 10 % of the limit. Not each
      // interval at 0.9 L or more: Envoy's token buckets refill on the clock, and on a busy machine one interval
      // came to 0.79 L (issue 59). Under 0.85 L over the run is the fleet under-admitting, whatever the machine.
      const mean = r.steady.reduce((a, b) => a + b, 0) / r.steady.length;
      expect(mean, shown).toBeGreaterThanOrEqual(0.85);
      expect(mean, shown).toBeLessThanOrEqual(1.1);
      for (const x of r.assignedWindows) expect(x, shown).toBeLessThanOrEqual(1.15);
      expect(r.windows.slice(2), shown).toEqual(r.assignedWindows.slice(2));
      expect(r.underServed, shown).toBeGreaterThanOrEqual(0.95);
    }
  }, 60_000);
});
