import { afterEach, describe, expect, it } from 'vitest';
import { StoreKeyError } from '../../src/errors.js';
import type { CounterCheck } from '../../src/limits/check.js';
import { PolicyStore } from '../../src/store/failure-policy.js';
import { parseRedisUrl } from '../../src/store/redis-connection.js';
import { RedisStore } from '../../src/store/redis-store.js';
import { counterCheck, slotOp } from '../helpers/checks.js';
import { SLOTS } from '../helpers/kinds.js';
import { type RedisCluster, startRedisCluster } from '../helpers/redis.js';
import { silentLogger } from '../helpers/service.js';
import { within } from '../helpers/time.js';

// A Redis Cluster that fails over (a master killed, or CLUSTER FAILOVER) or moves slots while an emulated Envoy
// takes and gives back in-flight slots, opens and settles reservations and counts plain windows: Redis's
// refusals from inside the script ("Script attempted to execute a command while the cluster is down", "... a
// non local key ...") are an outage or a slot to follow, never a refusal of the request's keys, so every
// give-back and settlement is kept and sent again and no slot is held past the failover.

const LEASE = 600_000;
const TENANTS = 10;
const LIMIT = 5;
const slot = (t: number, hits: number, id: string): CounterCheck =>
  counterCheck({ key: `t:{t${t}}:slots`, windowMs: LEASE, limit: LIMIT, ...slotOp(hits), kind: SLOTS, charge: true, slots: { id } });
const budget = (t: number, hits: number, id: string, settles = false): CounterCheck =>
  counterCheck({
    key: `t:{t${t}}:budget`,
    windowMs: 3_600_000,
    limit: 1e9,
    hits,
    charge: true,
    reservation: { key: `t:{t${t}}:rsv`, id, ttlMs: LEASE, settles },
  });
const plain = (t: number): CounterCheck => counterCheck({ key: `t:{t${t}}:plain`, windowMs: 3_600_000, limit: 1e9 });

let cluster: RedisCluster | undefined;
afterEach(async () => {
  await cluster?.stop();
  cluster = undefined;
});

/** Runs Envoy's calls at ~300 pairs a second for `ms`, calling `disrupt` after a second; returns what failed,
 * by error class, once every kept give-back and settlement went through. */
async function underTraffic(disrupt: (c: RedisCluster) => Promise<void>, ms: number) {
  cluster = await startRedisCluster({ replicas: 1, nodeTimeoutMs: 1000 });
  const inner = new RedisStore({ connection: parseRedisUrl(cluster.url, 'cluster'), timeoutMs: 500, keyPrefix: 'fo:', logger: silentLogger });
  expect(await inner.waitReady(10_000)).toBe(true);
  const store = new PolicyStore(inner, 'allow', silentLogger);
  const failed = { key: 0, outage: 0, calls: 0 };
  const call = async (checks: CounterCheck[]): Promise<boolean> => {
    failed.calls++;
    try {
      return (await store.check(checks)).admitted;
    } catch (err) {
      if (err instanceof StoreKeyError) failed.key++;
      else failed.outage++;
      return true; // Envoy's failure mode allows: the request runs, and gives back at its end
    }
  };
  const calls: Promise<unknown>[] = [];
  let n = 0;
  const t0 = Date.now();
  let disrupted: Promise<void> | undefined;
  while (Date.now() - t0 < ms) {
    if (!disrupted && Date.now() - t0 > 1000) disrupted = disrupt(cluster);
    for (let t = 0; t < TENANTS; t++) {
      const id = `r${n++}`;
      calls.push(call([slot(t, 1, id)]).then(async (ran) => ran && call([slot(t, -1, id)])));
      if (n % 3 === 0) calls.push(call([budget(t, 10, id)]).then(() => call([budget(t, 7, id, true)])));
      calls.push(call([plain(t)]));
    }
    await new Promise((r) => setTimeout(r, 33));
  }
  await Promise.all(calls);
  await disrupted;
  await within(20_000, async () => store.settlements.size === 0);
  // Every tenant's slots are free again: LIMIT new takes each are admitted.
  const free: number[] = [];
  for (let t = 0; t < TENANTS; t++) {
    const takes = await Promise.all(Array.from({ length: LIMIT }, (_, i) => store.check([slot(t, 1, `end-${t}-${i}`)])));
    free.push(takes.filter((r) => r.admitted).length);
  }
  const dropped = store.settlements.dropped;
  await store.close();
  return { failed, free, dropped };
}

/** The first node that is a master now, and a replica of it. */
async function masterAndReplica(c: RedisCluster) {
  const lines = (await c.nodes[0]!.cli('CLUSTER', 'NODES'))
    .trim()
    .split('\n')
    .map((l) => l.split(' '));
  const master = lines.find((l) => l[2]!.includes('master') && l[8] !== undefined)!;
  const replica = lines.find((l) => l[3] === master[0])!;
  const byAddr = (l: string[]) => c.nodes.find((n) => l[1]!.startsWith(`127.0.0.1:${n.port}@`))!;
  return { master: byAddr(master), masterId: master[0]!, replica: byAddr(replica) };
}

const noneStuck = Array.from({ length: TENANTS }, () => LIMIT);

describe('a Redis Cluster that fails over or moves slots under in-flight traffic', () => {
  it('a master killed (SIGKILL): no key refusal, every give-back kept, no slot held past the failover', async () => {
    const r = await underTraffic(async (c) => (await masterAndReplica(c)).master.signal('SIGKILL'), 8000);
    expect(r.failed.key).toBe(0);
    expect(r.dropped).toBe(0);
    expect(r.free).toEqual(noneStuck);
  }, 90_000);

  it('CLUSTER FAILOVER on a replica: no key refusal, no slot held', async () => {
    const r = await underTraffic(async (c) => {
      await (await masterAndReplica(c)).replica.cli('CLUSTER', 'FAILOVER');
    }, 5000);
    expect(r.failed.key).toBe(0);
    expect(r.dropped).toBe(0);
    expect(r.free).toEqual(noneStuck);
  }, 90_000);

  it('a reshard of 3,000 slots: no key refusal, no slot held, few calls unavailable', async () => {
    const r = await underTraffic(async (c) => {
      const { masterId } = await masterAndReplica(c);
      const to = (await c.nodes[0]!.cli('CLUSTER', 'NODES'))
        .trim()
        .split('\n')
        .map((l) => l.split(' '))
        .find((l) => l[2]!.includes('master') && l[0] !== masterId && l[8] !== undefined)![0]!;
      const seed = `127.0.0.1:${c.nodes[0]!.port}`;
      const { execFile } = await import('node:child_process');
      const args = [
        '--cluster',
        'reshard',
        seed,
        '--cluster-from',
        masterId,
        '--cluster-to',
        to,
        '--cluster-slots',
        '3000',
        '--cluster-yes',
        '--cluster-pipeline',
        '100',
      ];
      await new Promise((resolve) => execFile('redis-cli', args, resolve));
    }, 6000);
    expect(r.failed.key).toBe(0);
    // Sent again while the slot moves, within the store's timeout: at most 1% of calls answered unavailable.
    expect(r.failed.outage).toBeLessThanOrEqual(r.failed.calls / 100);
    expect(r.free).toEqual(noneStuck);
  }, 90_000);
});
