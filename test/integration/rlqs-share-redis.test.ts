import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fingerprint } from '../../src/fingerprint.js';
import { offer, SimEnvoy } from '../helpers/envoy-rlqs.js';
import { type RedisServer, startRedis } from '../helpers/redis.js';
import { startTestService, type TestService } from '../helpers/service.js';
import { within } from '../helpers/time.js';

// RLQS shares in Redis, two replicas (in this process) sharing one redis-server, simulated Envoys spread over
// them: a share table lost while its Envoys run their grants (deleted, as an eviction would; or Redis restarted
// without persistence) is rebuilt without the rates in force ever summing past the limit; and RLS decisions on
// the same descriptor keep their room. Reports every second; tenant: 100 requests a second in all.

const LIMIT = 100;
let redis: RedisServer;
const replicas: TestService[] = [];
const sims: SimEnvoy[] = [];

beforeAll(async () => {
  redis = await startRedis();
  const args = ['--store', 'redis', '--redis-url', redis.url, '--config', 'test/fixtures/rlqs', '--rlqs-report-interval', '1s'];
  for (let i = 0; i < 2; i++) replicas.push(await startTestService({ args, realClock: true }));
});
afterAll(async () => {
  for (const s of sims) s.close();
  for (const r of replicas) await r.close();
  await redis?.stop();
});

function sim(n: number, replica: number): SimEnvoy {
  const s = new SimEnvoy({ ports: [replicas[replica]!.service.grpcPort], localAddress: `127.0.0.${n}`, domain: 'rlqs-test', reportIntervalMs: 1000 });
  sims.push(s);
  return s;
}

/** Four instances, two on each replica, offering 80/s each to one bucket, converged. */
async function fleet(first: number, id: Record<string, string>): Promise<{ sim: SimEnvoy; id: Record<string, string>; rate: number }[]> {
  const load = [sim(first, 0), sim(first + 1, 1), sim(first + 2, 0), sim(first + 3, 1)].map((s) => ({ sim: s, id, rate: 80 }));
  await offer(load, 2500);
  for (const l of load) expect(l.sim.rateInForce(id)).toBeGreaterThan(0);
  return load;
}

/** The most the rates in force summed to, sampled every 5 ms while `load` is offered for `ms`. */
async function mostInForce(load: { sim: SimEnvoy; id: Record<string, string>; rate: number }[], ms: number): Promise<number> {
  let most = 0;
  const sample = setInterval(() => {
    most = Math.max(
      most,
      load.reduce((sum, l) => sum + l.sim.rateInForce(l.id), 0),
    );
  }, 5);
  await offer(load, ms).finally(() => clearInterval(sample));
  return most;
}

describe('RLQS share tables in Redis', () => {
  it('rebuilds a table deleted under running grants without the rates in force passing the limit', async () => {
    const id = { tenant: 'evicted' };
    const load = await fleet(60, id);
    const [table] = (await redis.cli('--scan', '--pattern', `*${fingerprint('evicted')}*:rlqs`)).split('\n');
    expect(await redis.cli('DEL', table!)).toBe('1');
    // Before, the first instance to report after the loss found itself alone and took all 100 while the others
    // still ran theirs: the rates in force summed to 1.75 L.
    expect(await mostInForce(load, 2500)).toBeLessThanOrEqual(LIMIT);
    // Rebuilt (one assignment TTL, 3 s): shares move again, and the fleet is held to the limit.
    await offer(load, 1500);
    const total = load.reduce((sum, l) => sum + l.sim.rateInForce(id), 0);
    expect(total).toBeGreaterThan(0.5 * LIMIT);
    expect(total).toBeLessThanOrEqual(LIMIT);
  });

  it('rebuilds every table after Redis restarts without persistence, the rates in force never past the limit', async () => {
    const id = { tenant: 'restarted' };
    const load = await fleet(70, id);
    redis.signal('SIGKILL');
    await new Promise((r) => redis.process.once('exit', r));
    await redis.restart();
    await within(10_000, () => replicas.every((r) => !r.service.stack.store.health().degraded), 'both replicas connected again');
    // Before: 1.25 L, as each replica's first reporter found an empty table.
    expect(await mostInForce(load, 2500)).toBeLessThanOrEqual(LIMIT);
    await offer(load, 1500);
    expect(load.reduce((sum, l) => sum + l.sim.rateInForce(id), 0)).toBeGreaterThan(0.5 * LIMIT);
  });

  it('leaves RLS its room on the per-second window it shares with RLQS', async () => {
    const s = sim(80, 0);
    const id = { tenant: 'both-in-redis' };
    let rls = 0;
    let refused = 0;
    let counting = false;
    const rlsLoad = setInterval(() => {
      replicas[1]!.rls.call({ domain: 'rlqs-test', descriptors: [{ entries: [{ key: 'tenant', value: 'both-in-redis' }] }] }).then(
        (res) => {
          if (counting && res.overall_code === 'OK') rls++;
          if (res.overall_code !== 'OK') refused++;
        },
        () => undefined,
      );
    }, 1000 / 60);
    try {
      await offer([{ sim: s, id, rate: 100 }], 2500);
      counting = true;
      const ms = 3000;
      const [rlqs] = await offer([{ sim: s, id, rate: 100 }], ms);
      counting = false;
      // Before: 138/s through one 100/s limit (RLS 46, RLQS all of 100); now about 100 (RLS 46, RLQS 55).
      expect(((rls + rlqs!) * 1000) / ms).toBeLessThanOrEqual(1.25 * LIMIT);
      expect(refused).toBe(0); // RLS, under the limit, is never refused for room RLQS holds
      expect(s.rateInForce(id)).toBeLessThan(LIMIT - (rls * 1000) / ms / 2); // RLQS's grant leaves RLS room
    } finally {
      clearInterval(rlsLoad);
    }
  });
});
