import { type ChildProcess, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect, descriptor, OK, rlsMessage, unary } from '../adversarial/rls-wire.mjs';
import { type Daemon, freePort, loopback, startCli } from '../helpers/process.js';
import { type RedisCluster, type RedisServer, startRedis, startRedisCluster } from '../helpers/redis.js';
import { configDir } from '../helpers/service.js';

// Issue 61, item 1, end to end: real Tollgate processes on one Redis and on a 3-master Cluster, and Envoys
// emulated as processes of their own (helpers/envoy-emulator.mjs: a connection per Envoy, x-tollgate-peer on
// every call, takes, stream-done give-backs, other traffic). Time is scaled: a 3 s lease stands for 30 s, a
// 16 s stream for a 15-minute one. A stream outlives five leases and both replicas' restarts, one by one, and
// keeps its slot; a killed Envoy's slot is back within a lease and a renewal period. One Redis is served by the
// node:http2 server, the Cluster by grpc-js.

const LEASE_MS = 3000;
const CONFIG = `domain: llm
descriptors:
  - key: tenant
    in_flight: {limit: 2, lease: 3s, max_hold: 2m, request_key: request_id}
`;

interface Envoy {
  child: ChildProcess;
  events: Record<string, unknown>[];
  next(key: string): Promise<Record<string, unknown>>;
  give(id: string): Promise<unknown>;
}

function startEnvoy(ports: number[], peer: string, tenant: string, ids: string[]): Envoy {
  const child = spawn(process.execPath, ['test/helpers/envoy-emulator.mjs', ports.join(','), peer, 'llm', tenant, ids.join(',')]);
  const events: Record<string, unknown>[] = [];
  const waiting: { key: string; resolve: (e: Record<string, unknown>) => void }[] = [];
  // Events no one waited for yet, kept for the next wait on their key.
  const unread: Record<string, unknown>[] = [];
  createInterface({ input: child.stdout! }).on('line', (line) => {
    const e = JSON.parse(line) as Record<string, unknown>;
    events.push(e);
    const w = waiting.findIndex((x) => x.key in e);
    if (w >= 0) waiting.splice(w, 1)[0]!.resolve(e);
    else unread.push(e);
  });
  const next = (key: string) => {
    const at = unread.findIndex((e) => key in e);
    if (at >= 0) return Promise.resolve(unread.splice(at, 1)[0]!);
    return within(10_000, `the Envoy's ${key}`, new Promise<Record<string, unknown>>((resolve) => waiting.push({ key, resolve })));
  };
  return {
    child,
    events,
    next,
    give: async (id) => {
      const gave = next('gave');
      child.stdin!.write(`give ${id}\n`);
      return (await gave).gave;
    },
  };
}

/** Whether one more request of `tenant` gets a slot now, asked on a connection of its own (no peer header). */
async function fits(port: number, tenant: string, id: string): Promise<boolean> {
  const s = await within(5000, `a connection to ${port}`, connect(port));
  if (!s) throw new Error(`replica on ${port} is not answering`);
  const r = await within(
    5000,
    `an answer from ${port}`,
    unary(
      s,
      rlsMessage('llm', [
        descriptor(
          [
            ['tenant', tenant],
            ['request_id', id],
          ],
          1,
        ),
      ]),
    ),
  );
  s.close();
  if (r.status !== '0') throw new Error(`probe answered ${r.status}`);
  return r.answer?.overall === OK;
}

/** `p`, or an error naming what did not come in `ms`: a failure says where, never a test timeout. */
function within<T>(ms: number, what: string, p: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: none in ${ms} ms`)), ms);
  });
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe.each(['redis', 'redis cluster'])('long streams and dead Envoys, %s, two replicas restarted one by one', (topology) => {
  let redis: RedisServer | RedisCluster | undefined;
  const replicas: (Daemon | undefined)[] = [];
  const envoys: Envoy[] = [];
  let ports: number[] = [];
  let dir = '';
  const start = async (i: number) => {
    replicas[i] = await startCli(['serve', '--config', dir, ...loopback(ports[i]!, 0), '--admin-port', '0'], /tollgate serving/, {
      BACKEND_TYPE: 'redis',
      REDIS_URL: redis!.url,
      REDIS_TYPE: topology === 'redis' ? 'single' : 'cluster',
      REDIS_TIMEOUT_MS: '500',
      // Both gRPC servers name a call's connection their own way (server/peers.ts): one each.
      GRPC_SERVER: topology === 'redis' ? 'http2' : 'grpc-js',
      LOG_LEVEL: 'info',
    });
  };
  const restart = async (i: number) => {
    replicas[i]!.child.kill('SIGTERM');
    expect(await within(15_000, `replica ${i} stopping`, replicas[i]!.exited)).toBe(0);
    await start(i);
  };

  beforeAll(async () => {
    redis = topology === 'redis' ? await startRedis() : await startRedisCluster();
    dir = configDir({ 'llm.yaml': CONFIG });
    ports = [await freePort(), await freePort()];
    await start(0);
    await start(1);
  }, 60_000);
  afterAll(async () => {
    for (const e of envoys) e.child.kill('SIGKILL');
    for (const r of replicas) r?.child.kill('SIGKILL');
    await redis?.stop();
  });

  it('a stream of five leases keeps its slot through both restarts; a killed Envoy frees its slot within a lease', async () => {
    // Envoy A runs 2 long streams of acme (its whole limit); Envoy B one of beta, then is killed.
    const a = startEnvoy(ports, 'envoy-a', 'acme', ['a1', 'a2']);
    const b = startEnvoy([ports[1]!, ports[0]!], 'envoy-b', 'beta', ['b1', 'b2']);
    envoys.push(a, b);
    expect((await a.next('taken')).taken).toEqual([OK, OK]);
    expect((await b.next('taken')).taken).toEqual([OK, OK]);
    const refusedAt: boolean[] = [];
    const probe = async (n: number) => {
      for (let i = 0; i < n; i++) {
        refusedAt.push(!(await fits(ports[i % 2]!, 'acme', `probe-${refusedAt.length}`)));
        await sleep(500);
      }
    };
    await probe(6);
    await restart(0);
    await probe(6);
    await restart(1);
    await probe(8);
    // 20 probes over 5+ leases, two restarts between: not one found a slot of acme free.
    expect(refusedAt.filter((r) => !r)).toEqual([]);
    expect(refusedAt.length).toBe(20);

    b.child.kill('SIGKILL');
    const killedAt = Date.now();
    while (!(await fits(ports[0]!, 'beta', `after-${Date.now()}`))) {
      if (Date.now() - killedAt > 4 * LEASE_MS) throw new Error('the killed Envoy still holds its slots after 4 leases');
      await sleep(100);
    }
    const backMs = Date.now() - killedAt;
    // Back within a lease and a renewal period (a third of it), with a margin for a busy machine.
    expect(backMs).toBeLessThan(LEASE_MS + LEASE_MS / 3 + 1500);

    // A's stream-done calls give its slots back through whichever replica it is connected to now.
    expect(await a.give('a1')).toBe('OK');
    expect(await fits(ports[1]!, 'acme', 'after-give-back')).toBe(true);
  }, 90_000);
});
