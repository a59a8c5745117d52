import calculateSlot from 'cluster-key-slot';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { counterId, counterKeyOf, storeKey, windowKey } from '../../src/counters/keys.js';
import { parseRedisUrl } from '../../src/store/redis-connection.js';
import { RedisStore } from '../../src/store/redis-store.js';
import type { CounterCheck } from '../../src/store/store.js';
import { counterCheck } from '../helpers/checks.js';
import { type RedisCluster, startRedisCluster } from '../helpers/redis.js';
import { silentLogger } from '../helpers/service.js';

// The Redis store on a 3-master Cluster batches per master, not per slot (src/store/cluster-routes.ts,
// redis-script.ts's Cluster variant): a turn's decisions cost one script call per master whatever clients they
// are for, a request on one master is one atomic call, and a slot that moves is followed without counting twice.

const PREFIX = 'cb:';
let cluster: RedisCluster;
let store: RedisStore;

beforeAll(async () => {
  cluster = await startRedisCluster();
  store = new RedisStore({ connection: parseRedisUrl(cluster.url, 'cluster'), timeoutMs: 2000, keyPrefix: PREFIX, logger: silentLogger });
  expect(await store.waitReady(10_000)).toBe(true);
}, 60_000);
afterAll(async () => {
  await store?.close();
  await cluster?.stop();
});

/** An hourly window of one client (its own hash tag), limit out of reach. */
function hourly(client: string, hits = 1): CounterCheck {
  return counterCheck({ key: windowKey(counterKeyOf(counterId('cluster-test', 'token'), client), 'hour'), windowMs: 3_600_000, limit: 1_000_000, hits });
}

/** Script calls (EVALSHA and EVAL) run so far, on every master. */
async function scriptCalls(): Promise<number> {
  let sum = 0;
  for (const n of cluster.nodes) {
    const stats = await n.cli('INFO', 'commandstats');
    for (const m of stats.matchAll(/cmdstat_(?:evalsha|eval):calls=(\d+)/g)) sum += Number(m[1]);
  }
  return sum;
}

/** The node serving a slot, from CLUSTER SLOTS on the first node: [port, node id]. */
async function owner(slot: number): Promise<{ port: number; id: string }> {
  const out = (await cluster.nodes[0]!.cli('CLUSTER', 'NODES')).trim().split('\n');
  for (const line of out) {
    const [id, addr, , , , , , , ...ranges] = line.split(' ');
    for (const r of ranges) {
      const [a, b] = r.split('-').map(Number);
      if (slot >= a! && slot <= (b ?? a)!) return { port: Number(addr!.split(':')[1]!.split('@')[0]), id: id! };
    }
  }
  throw new Error(`no owner for slot ${slot}`);
}

const slotOf = (c: CounterCheck): number => calculateSlot(storeKey(PREFIX, c.key));

describe('the Redis store on a 3-master Cluster', () => {
  it("decides 60 clients' requests of one turn in one script call per master, not one per slot", async () => {
    await Promise.all(Array.from({ length: 3 }, (_, i) => store.check([hourly(`warm-${i}`)]))); // the map of slots read
    const before = await scriptCalls();
    const results = await Promise.all(Array.from({ length: 60 }, (_, i) => store.check([hourly(`many-${i}`)])));
    expect(results.every((r) => r.admitted)).toBe(true);
    expect(await scriptCalls()).toBeLessThanOrEqual(before + 3);
  });

  it("decides a request whose two clients' counters are on one master in one call, both counted", async () => {
    const first = hourly('pair-a');
    const master = (await owner(slotOf(first))).port;
    let second: CounterCheck | undefined;
    for (let i = 0; !second; i++) {
      const c = hourly(`pair-b-${i}`);
      if (slotOf(c) !== slotOf(first) && (await owner(slotOf(c))).port === master) second = c;
    }
    const before = await scriptCalls();
    await store.check([first, second]);
    const r = await store.check([first, second]);
    expect(await scriptCalls()).toBe(before + 2);
    expect(r.curr).toEqual([1, 1]);
  });

  it('follows a slot moved to another master: the call that finds it not local writes nothing, and the request is counted once', async () => {
    const check = hourly('moving');
    const slot = slotOf(check);
    expect((await store.check([check])).curr).toEqual([0]);
    const from = await owner(slot);
    const to = cluster.nodes.find((n) => n.port !== from.port)!;
    const toId = (await to.cli('CLUSTER', 'MYID')).trim();
    const fromNode = cluster.nodes.find((n) => n.port === from.port)!;
    await to.cli('CLUSTER', 'SETSLOT', String(slot), 'IMPORTING', from.id);
    await fromNode.cli('CLUSTER', 'SETSLOT', String(slot), 'MIGRATING', toId);
    const keys = (await fromNode.cli('CLUSTER', 'GETKEYSINSLOT', String(slot), '100')).trim().split('\n').filter(Boolean);
    expect(keys.length).toBeGreaterThan(0);
    await fromNode.cli('MIGRATE', '127.0.0.1', String(to.port), '', '0', '5000', 'KEYS', ...keys);
    for (const n of cluster.nodes) await n.cli('CLUSTER', 'SETSLOT', String(slot), 'NODE', toId);
    // The store's map still names the old master: its per-node call finds the key not local, and goes again by slot.
    expect((await store.check([check])).curr).toEqual([1]);
    expect((await store.check([check])).curr).toEqual([2]);
  });
});
