import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { setPriority } from 'node:os';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { underAttackBound } from '../helpers/latency-bound.js';
import { metric } from '../helpers/metrics.js';
import { type Daemon, freePort, loopback, startCli } from '../helpers/process.js';
import { seriesOf } from '../helpers/scrape-again.js';
import { RlsClient, type RlsRequest } from '../helpers/service.js';
import { within } from '../helpers/time.js';
// @ts-expect-error: a plain .mjs file (it runs as a process of its own), without types
import { ATTACKS } from './port-attacks.mjs';

// Issue 50's goals, each attack alone against a built replica on both servers: the replica stays alive, grows by
// less than 300 MiB, and a well-behaved client beside the attacker (100 ShouldRateLimit calls a second on its own
// connection, as Envoy sends them, with a 2 s deadline) loses no call and keeps its p99 within 10x the same run's
// idle p99 or idle + 500 ms (helpers/latency-bound.ts: relative to this machine, issue 59; the figure itself is
// `npm run bench`'s). Memory and latency are this file's subject, so it runs alone (vitest.config.ts ALONE).

/** Each attack's time beside the well-behaved client: 300 of its calls, so p99 is its third-worst. */
const ATTACK_MS = 3000;
const RSS_GROWTH_MB = 300;

function rssMb(pid: number): number {
  const kb = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]!;
  return Number(kb) / 1024;
}

const CALL: RlsRequest = {
  domain: 'property-api',
  descriptors: [
    {
      entries: [
        { key: 'category', value: 'read' },
        { key: 'token', value: 'well-behaved' },
      ],
    },
  ],
};

/** One attack for `ms`, from a process of its own and an address of its own (127.0.3.1: the pace its address earns
 * is not the well-behaved client's), at a lower priority: an attacker runs on a machine of its own, and here its
 * busy loop would otherwise take one of this machine's two cores from the replica it attacks. */
function attack(name: string, port: number, ms: number): Promise<number | null | 'stopped'> {
  const script = new URL('./port-attacks.mjs', import.meta.url).pathname;
  const child = spawn(process.execPath, [script, name, String(port), String(ms), '127.0.3.1'], { stdio: 'inherit' });
  if (child.pid) setPriority(child.pid, 10);
  // Its own timer ends the attack at `ms`, but a busy loop of resets and reconnects can hold its event loop for
  // seconds past that (rapidReset: 5-8 s here, a minute beside two busy loops): past `ms` + 5 s the test ends it.
  let stopped = false;
  const stop = setTimeout(() => {
    stopped = true;
    child.kill('SIGKILL');
  }, ms + 5000);
  return new Promise((resolve) =>
    child.on('exit', (code) => {
      clearTimeout(stop);
      resolve(stopped ? 'stopped' : code);
    }),
  );
}

/** The well-behaved client for `ms`: its calls' latencies (ms) and how many failed. */
async function behave(client: RlsClient, ms: number): Promise<{ p99: number; failed: number; errors: string[] }> {
  const latencies: number[] = [];
  let failed = 0;
  const errors: string[] = [];
  const calls: Promise<void>[] = [];
  const end = Date.now() + ms;
  while (Date.now() < end) {
    const start = performance.now();
    calls.push(
      client.call(CALL, 2000).then(
        () => void latencies.push(performance.now() - start),
        (err: Error) => {
          failed++;
          errors.push(err.message);
        },
      ),
    );
    await new Promise((r) => setTimeout(r, 10));
  }
  await Promise.all(calls);
  latencies.sort((a, b) => a - b);
  return { p99: latencies[Math.floor(latencies.length * 0.99)] ?? Infinity, failed, errors };
}

describe.each(['http2', 'grpc-js'])('GRPC_SERVER=%s: one client at the port', (server) => {
  let daemon: Daemon;
  let client: RlsClient;
  let idle: number;
  let base: number;
  let grpcPort: number;
  let httpPort: number;
  beforeAll(async () => {
    grpcPort = await freePort();
    httpPort = await freePort();
    daemon = await startCli(['serve', '--grpc-server', server, ...loopback(grpcPort, httpPort)], /tollgate serving/);
    client = new RlsClient(grpcPort, { 'grpc.tollgate.well-behaved': 1 });
    await behave(client, 300); // warm
    idle = (await behave(client, 1000)).p99;
    base = rssMb(daemon.child.pid!);
  });
  afterAll(async () => {
    client?.close();
    daemon?.child.kill('SIGTERM');
    await daemon?.exited;
  });

  it.each(Object.keys(ATTACKS as object))(
    '%s: the replica lives, stays within its memory and serves the well-behaved client',
    async (name) => {
      const pid = daemon.child.pid!;
      let peak = rssMb(pid);
      const sampler = setInterval(() => {
        if (daemon.child.exitCode === null) peak = Math.max(peak, rssMb(pid));
      }, 100);
      const attacked = attack(name, grpcPort, ATTACK_MS + 600);
      await new Promise((r) => setTimeout(r, 300)); // the attack under way
      const seen = await behave(client, ATTACK_MS);
      // It ran its time and let go, or ran past it and was ended (never an attacker that failed: nothing attacked).
      expect([0, 'stopped']).toContain(await attacked);
      clearInterval(sampler);
      // The figures, for the closing note of a change that moves them.
      console.log(`${server} ${name}: p99 ${seen.p99.toFixed(1)} ms (idle ${idle.toFixed(1)}), ${seen.failed} failed, RSS +${(peak - base).toFixed(0)} MiB`);
      expect(daemon.child.exitCode, daemon.output().slice(-2000)).toBeNull();
      expect(seen.errors).toEqual([]);
      expect(seen.p99, `p99 under attack against the idle ${idle.toFixed(1)} ms`).toBeLessThanOrEqual(underAttackBound(idle));
      expect(peak - base).toBeLessThan(RSS_GROWTH_MB);
      // Whatever the attack made the replica hold is given back once its streams are gone.
      await within(10_000, async () => metric(await seriesOf(httpPort), 'tollgate_grpc_request_bytes_held') === 0, 'request bytes given back');
    },
    30_000,
  );
});
