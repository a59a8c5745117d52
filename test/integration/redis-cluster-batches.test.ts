import calculateSlot from 'cluster-key-slot';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { counterId, counterKeyOf, storeKey, windowCounterName, windowKey } from '../../src/counters/keys.js';
import type { CounterCheck } from '../../src/limits/check.js';
import { OverLimitCache } from '../../src/store/over-limit-cache.js';
import { parseRedisUrl } from '../../src/store/redis-connection.js';
import { CHECK_SCRIPT, CLUSTER_CHECK_SCRIPT } from '../../src/store/redis-script.js';
import { RedisStore } from '../../src/store/redis-store.js';
import { counterCheck } from '../helpers/checks.js';
import { BUCKET, FIXED, type KindCode, SLIDING } from '../helpers/kinds.js';
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

  it('a master that lost its scripts (SCRIPT FLUSH) gets the per-node script by EVAL, once: the request counted once', async () => {
    const c = hourly('flushed');
    await store.check([c]);
    const evals = async (): Promise<number> => {
      let sum = 0;
      for (const n of cluster.nodes) sum += Number(/cmdstat_eval:calls=(\d+)/.exec(await n.cli('INFO', 'commandstats'))?.[1] ?? 0);
      return sum;
    };
    const before = await evals();
    for (const n of cluster.nodes) await n.cli('SCRIPT', 'FLUSH');
    expect((await store.check([c])).curr).toEqual([1]);
    expect(await evals()).toBe(before + 1);
    expect((await store.check([c])).curr).toEqual([2]);
    expect(await evals()).toBe(before + 1);
    // The other masters' scripts back, as the store loads them when it connects: the next tests count calls.
    for (const n of cluster.nodes) for (const script of [CHECK_SCRIPT, CLUSTER_CHECK_SCRIPT]) await n.cli('SCRIPT', 'LOAD', script.text);
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

  it('with a 10 ms batch window, a request whose clients are on two masters is counted once on each', async () => {
    const windowed = new RedisStore({
      connection: parseRedisUrl(cluster.url, 'cluster'),
      timeoutMs: 2000,
      keyPrefix: PREFIX,
      logger: silentLogger,
      batch: { windowMs: 10, limit: 0 },
    });
    try {
      expect(await windowed.waitReady(10_000)).toBe(true);
      await windowed.check([hourly('window-warm')]); // the map of slots read
      const first = hourly('window-a');
      const master = (await owner(slotOf(first))).port;
      let second: CounterCheck | undefined;
      for (let i = 0; !second; i++) {
        const c = hourly(`window-b-${i}`);
        if ((await owner(slotOf(c))).port !== master) second = c;
      }
      expect((await windowed.check([first, second])).admitted).toBe(true);
      expect((await windowed.check([first, second])).curr).toEqual([1, 1]);
    } finally {
      await windowed.close();
    }
  });

  describe('a plain request over two masters (src/store/across-parts.ts)', () => {
    /** A window of client `a` (kind `kind`, limit `aLimit`) and one of a client `b` on another master (fixed, `bLimit`). */
    async function split(name: string, kind: KindCode, aLimit: number, bLimit: number): Promise<[CounterCheck, CounterCheck]> {
      const burst = kind === BUCKET ? aLimit : 0;
      const a = { ...hourly(`${name}-a`), kind, limit: aLimit, burst };
      const master = (await owner(slotOf(a))).port;
      for (let i = 0; ; i++) {
        const b = { ...hourly(`${name}-b-${i}`), limit: bLimit };
        if ((await owner(slotOf(b))).port !== master) return [a, b];
      }
    }

    it('costs one script call on each master, not a peek and then a count on each', async () => {
      const [a, b] = await split('one-trip', FIXED, 10, 10);
      await store.check([hourly('one-trip-warm')]); // the map of slots read
      const before = await scriptCalls();
      const r = await store.check([a, b]);
      expect([r.admitted, await scriptCalls()]).toEqual([true, before + 2]);
      expect(
        (
          await store.check([
            { ...a, hits: 0 },
            { ...b, hits: 0 },
          ])
        ).curr,
      ).toEqual([1, 1]);
    });

    it.each([
      ['fixed window', FIXED],
      ['sliding window', SLIDING],
      ['token bucket', BUCKET],
    ] as const)('refused by one master, what the other counted is given back: %s', async (_name, kind) => {
      const [a, b] = await split(`undo-${kind}`, kind, 3, 1);
      expect((await store.check([a, b])).admitted).toBe(true);
      for (let i = 0; i < 3; i++) expect((await store.check([a, b])).admitted).toBe(false);
      // a holds 1 of 3: two more alone are admitted (kept, the refused requests' counts would have filled it).
      const alone = [];
      for (let i = 0; i < 5; i++) alone.push((await store.check([a])).admitted);
      expect(alone.filter(Boolean)).toHaveLength(2);
    });

    it("what a refused request counted for a moment is not kept as full by any replica's over-limit cache", async () => {
      const cache = new OverLimitCache(store);
      const announced: string[] = [];
      cache.onRefund = (keys) => announced.push(...keys);
      const [a, b] = await split('cached', FIXED, 1, 1);
      await store.check([hourly('cached-warm')]);
      expect((await cache.check([b])).admitted).toBe(true); // b is full
      // One turn: [a, b] counts a on its master, then [a] finds it taken, before [a, b]'s give-back.
      const [pair, alone] = await Promise.all([cache.check([a, b]), cache.check([a])]);
      expect([pair.admitted, alone.admitted]).toEqual([false, false]);
      expect(announced).toEqual([a.key]); // the other replicas forget it too (service.ts)
      const next = await cache.check([a]);
      expect([next.admitted, next.source]).toEqual([true, undefined]); // asked Redis, which holds a at 0
    });

    it.each([
      ['', false],
      [', and after a move of its slot the store did not know of', true],
    ] as const)('a give-back lands in the window its count went to, though the next has begun when it is sent%s', async (_, moved) => {
      const T = 1_800_000_000_000; // a minute's start
      // The store reads its clock once a call: the counts in the minute's last milliseconds, anything after them
      // (a give-back sent at its own time would be) in the next minute.
      let times: number[] = [];
      const clock = { now: () => times.shift() ?? T + 60_010 };
      const timed = new RedisStore({ connection: parseRedisUrl(cluster.url, 'cluster'), timeoutMs: 2000, keyPrefix: PREFIX, logger: silentLogger, clock });
      try {
        expect(await timed.waitReady(10_000)).toBe(true);
        const [a0, b0] = await split(`boundary-${moved}`, FIXED, 10, 1);
        const [a, b] = [
          { ...a0, windowMs: 60_000 },
          { ...b0, windowMs: 60_000 },
        ];
        await timed.check([hourly('boundary-warm')]);
        times = [T + 59_990, T + 59_995, T + 59_995]; // b filled; then [a, b]'s two parts
        expect((await timed.check([b])).admitted).toBe(true);
        if (moved) {
          // a's part finds its key not local and goes again by slot (one more call), and so does its give-back.
          await moveSlot(slotOf(a));
          times.push(T + 59_996);
        }
        expect((await timed.check([a, b])).admitted).toBe(false);
        expect(times).toEqual([]);
        const port = (await owner(slotOf(a))).port;
        const counter = await cluster.nodes.find((n) => n.port === port)!.cli('GET', windowCounterName(storeKey(PREFIX, a.key), 60_000, T));
        expect(counter.trim()).toBe('0'); // counted in the first minute, given back there
      } finally {
        await timed.close();
      }
    });

    it("a master that does not answer fails the request, and the other master's count is given back", async () => {
      const quick = new RedisStore({ connection: parseRedisUrl(cluster.url, 'cluster'), timeoutMs: 150, keyPrefix: PREFIX, logger: silentLogger });
      try {
        expect(await quick.waitReady(10_000)).toBe(true);
        const [a, b] = await split('frozen', FIXED, 10, 10);
        await quick.check([hourly('frozen-warm')]);
        const bPort = (await owner(slotOf(b))).port;
        const node = cluster.nodes.find((n) => n.port === bPort)!;
        node.signal('SIGSTOP'); // well under the cluster's node timeout (2 s): nobody fails it over
        try {
          await expect(quick.check([a, b])).rejects.toThrow();
        } finally {
          node.signal('SIGCONT');
        }
        // The give-back goes on quick's connection, this read on store's: wait for it to land.
        await vi.waitFor(async () => expect((await store.check([{ ...a, hits: 0 }])).curr).toEqual([0]), { timeout: 5000, interval: 25 });
      } finally {
        await quick.close();
      }
    });

    it('200 at once, one master allowing 50: 50 admitted, and the other master holds exactly their 50', async () => {
      const [a, b] = await split('burst', FIXED, 1_000, 50);
      await store.check([hourly('burst-warm')]);
      const results = await Promise.all(Array.from({ length: 200 }, () => store.check([a, b])));
      expect(results.filter((r) => r.admitted)).toHaveLength(50);
      // The give-backs go ahead of this read on a's master (queued first, urgent, on the same connection).
      expect(
        (
          await store.check([
            { ...a, hits: 0 },
            { ...b, hits: 0 },
          ])
        ).curr,
      ).toEqual([50, 50]);
    });
  });

  it('follows a slot moved to another master: the call that finds it not local writes nothing, and the request is counted once', async () => {
    const check = hourly('moving');
    expect((await store.check([check])).curr).toEqual([0]);
    await moveSlot(slotOf(check));
    // The store's map still names the old master: its per-node call finds the key not local, and goes again by slot.
    expect((await store.check([check])).curr).toEqual([1]);
    expect((await store.check([check])).curr).toEqual([2]);
  });

  it('a moved slot found by the reads a request that is not plain needs first: nothing written, counted once by slot', async () => {
    // A sliding window is read before anything is written (the previous window too), on a Cluster master by a
    // GET each: the key found not local there ends the call before any write.
    const sliding = { ...hourly('moving-read'), kind: SLIDING };
    expect((await store.check([sliding])).curr).toEqual([0]);
    await moveSlot(slotOf(sliding));
    expect((await store.check([sliding])).curr).toEqual([1]);
    expect((await store.check([sliding])).curr).toEqual([2]);
  });

  it('a moved slot found in the middle of a batch: the requests before it are counted by that call, it and the rest once by slot', async () => {
    const moved = hourly('moved-mid');
    const from = (await owner(slotOf(moved))).port;
    // Clients of the same master, so that all of them are one script call on it.
    const local: CounterCheck[] = [];
    for (let i = 0; local.length < 12; i++) {
      const c = hourly(`mid-${i}`);
      if (slotOf(c) !== slotOf(moved) && (await owner(slotOf(c))).port === from) local.push(c);
    }
    await store.check([hourly('warm-mid')]); // the map of slots read
    await moveSlot(slotOf(moved));
    // One request of two clients' windows, the second's slot moved: its first INCRBY is taken back.
    const requests = [...local.slice(0, 5).map((c) => [c]), [local[5]!, moved], ...local.slice(6).map((c) => [c]), [moved]];
    const first = await Promise.all(requests.map((r) => store.check(r)));
    expect(first.every((r) => r.admitted)).toBe(true);
    // Every window counted once per request that held it: moved twice, the rest once.
    const again = await Promise.all(requests.map((r) => store.check(r)));
    const [pair, alone] = [again[5]!.curr, again.at(-1)!.curr];
    expect([...again.slice(0, 5), ...again.slice(6, -1)].map((r) => r.curr)).toEqual(Array.from({ length: 11 }, () => [1]));
    expect(pair[0]).toBe(1);
    // The pair now spans two masters (slot by slot, in two phases), so the two requests of moved may count in
    // either order: 2 and 3 between them.
    expect([pair[1], alone[0]].sort()).toEqual([2, 3]);
  });
});

/** Moves a slot, with its keys, to another master, as resharding does; the store's map is not told. */
async function moveSlot(slot: number): Promise<void> {
  const from = await owner(slot);
  const to = cluster.nodes.find((n) => n.port !== from.port)!;
  const toId = (await to.cli('CLUSTER', 'MYID')).trim();
  const fromNode = cluster.nodes.find((n) => n.port === from.port)!;
  await to.cli('CLUSTER', 'SETSLOT', String(slot), 'IMPORTING', from.id);
  await fromNode.cli('CLUSTER', 'SETSLOT', String(slot), 'MIGRATING', toId);
  const keys = (await fromNode.cli('CLUSTER', 'GETKEYSINSLOT', String(slot), '100')).trim().split('\n').filter(Boolean);
  if (keys.length > 0) await fromNode.cli('MIGRATE', '127.0.0.1', String(to.port), '', '0', '5000', 'KEYS', ...keys);
  for (const n of cluster.nodes) await n.cli('CLUSTER', 'SETSLOT', String(slot), 'NODE', toId);
}
