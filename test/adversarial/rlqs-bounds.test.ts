import { readFileSync } from 'node:fs';
import http2 from 'node:http2';
import net from 'node:net';
import { Worker } from 'node:worker_threads';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeReport } from '../helpers/envoy-rlqs.js';
import { MessageCounter } from '../helpers/grpc-frames.js';
import { underAttackBound } from '../helpers/latency-bound.js';
import { metric } from '../helpers/metrics.js';
import { type Daemon, freePort, loopback, startCli } from '../helpers/process.js';
import { seriesOf } from '../helpers/scrape-again.js';
import { bounded, sleep, within } from '../helpers/time.js';

// Issue 36's attacks on the RLQS port, each against a served process, each measured by the process's RSS and by
// RLS calls made meanwhile from a thread of their own (rls-prober.mjs): silent streams from one address and from
// 100; 64 streams × 10,000 buckets from one address, reported every second; one stream re-sending its
// 10,000-bucket report back to back. Each must leave RSS growth under 300 MiB and every RLS call answered with its
// decision, at a p99 within 10x the same run's idle p99 or idle + 500 ms, whichever is more: a bound relative to
// this machine, which a stall of the event loop for the attack's sake still exceeds (issue 59: an absolute 50 ms
// failed at load 8 with an idle p99 of 24 ms). The latency figure itself is a goal for `npm run bench`.

const GROWTH_BOUND_MB = 300;
const RLQS_PATH = '/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas';

/** CPU seconds the process has used (user and system: /proc/PID/stat fields 14 and 15, in ticks of 1/100 s). */
function cpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

function rssMb(pid: number): number {
  const kb = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]!;
  return Number(kb) / 1024;
}

/** A gRPC message frame around an encoded report, made once and sent many times. */
function frameOf(domain: string, ids: Record<string, string>[]): Buffer {
  const body = encodeReport(
    domain,
    ids.map((bucket) => ({ bucket_id: { bucket }, time_elapsed: { seconds: 1 }, num_requests_allowed: 1 })),
  );
  const frame = Buffer.alloc(5 + body.length);
  frame.writeUInt32BE(body.length, 1);
  body.copy(frame, 5);
  return frame;
}

/** An HTTP/2 connection from its own loopback address, whose streams count the answers they get. */
class Attacker {
  readonly session: http2.ClientHttp2Session;
  readonly answers: MessageCounter[] = [];
  ended = 0;

  constructor(port: number, localAddress: string) {
    this.session = http2.connect(`http://127.0.0.1:${port}`, {
      createConnection: () => net.connect({ host: '127.0.0.1', port, localAddress }),
      settings: { initialWindowSize: 1 << 24 },
    });
    this.session.on('error', () => undefined);
  }

  open(): http2.ClientHttp2Stream {
    const s = this.session.request({ ':method': 'POST', ':path': RLQS_PATH, 'content-type': 'application/grpc', te: 'trailers' });
    s.on('error', () => undefined);
    const counter = new MessageCounter();
    this.answers.push(counter);
    s.on('data', (d: Buffer) => counter.add(d));
    // Ended by the server: a status in the headers (trailers-only) or in trailers. The stream itself stays
    // half open (this side never ends it), so 'close' would not say so.
    s.on('response', (h) => h['grpc-status'] !== undefined && this.ended++);
    s.on('trailers', () => this.ended++);
    return s;
  }

  close(): void {
    this.session.destroy();
  }
}

/** Calls the prober found wrong or late: how many, and the first few. */
type Found = { count: number; first: string[] };

/** RLS calls, one after another 20 ms apart, in a worker thread (this thread is busy attacking). */
class Probe {
  private readonly worker: Worker;
  private readonly inbox: { type: string; latencies?: number[]; wrong?: Found; late?: Found; error?: string }[] = [];
  private wake: (() => void) | undefined;

  constructor(port: number) {
    const workerData = { port, domain: 'rlqs-test', key: 'tenant', limit: 100, exact: true, deadlineMs: 2000, gapMs: 20 };
    this.worker = new Worker(new URL('./rls-prober.mjs', import.meta.url), { workerData });
    this.worker.on('message', (m) => {
      this.inbox.push(m);
      this.wake?.();
    });
  }

  private async next(): Promise<(typeof this.inbox)[number]> {
    while (this.inbox.length === 0) await new Promise<void>((r) => (this.wake = r));
    return this.inbox.shift()!;
  }

  async ready(): Promise<void> {
    const m = await bounded(this.next(), 20_000, 'the RLS prober connected');
    if (m.error) throw new Error(`the RLS prober did not connect: ${m.error}`);
  }

  /** The p99 of RLS calls made while `during` runs; every call must be answered with its decision. */
  async p99(tag: string, during: () => Promise<void>): Promise<number> {
    this.worker.postMessage({ type: 'begin', tag });
    const ended = async () => {
      this.worker.postMessage({ type: 'end' });
      return await bounded(this.next(), 10_000, 'the RLS prober stopped');
    };
    // A `during` that fails still ends the round, so the next one's result is its own.
    await during().catch(async (err: unknown) => {
      await ended();
      throw err;
    });
    const r = await ended();
    expect(r.wrong?.first ?? [], 'RLS answers during the attack').toEqual([]);
    // No call of the well-behaved client lost to its 2 s deadline either: a stall that long is no latency figure.
    expect(r.late?.first ?? [], 'RLS calls past their deadline during the attack').toEqual([]);
    const l = [...(r.latencies ?? [])].sort((a, b) => a - b);
    expect(l.length).toBeGreaterThan(10);
    return l[Math.floor(l.length * 0.99)]!;
  }

  async close(): Promise<void> {
    this.worker.postMessage({ type: 'close' });
    await this.worker.terminate();
  }
}

describe('RLQS attacks on the gRPC port (issue 36)', () => {
  let daemon: Daemon;
  let grpcPort: number;
  let httpPort: number;
  let probe: Probe;
  let idleP99 = 0;
  const attackers: Attacker[] = [];
  const gauge = async (name: string) => metric(await seriesOf(httpPort), name) ?? 0;
  const counter = async (name: string, labels: Record<string, string>) => metric(await seriesOf(httpPort), name, labels) ?? 0;

  beforeAll(async () => {
    grpcPort = await freePort();
    httpPort = await freePort();
    // Envoy's 5 s report interval: a stream's answers begin at least 1 s apart.
    const args = ['serve', '--config', 'test/fixtures/rlqs', ...loopback(grpcPort, httpPort)];
    daemon = await startCli(args, /tollgate serving/);
    probe = new Probe(grpcPort);
    await probe.ready();
    idleP99 = await probe.p99('idle', () => sleep(2000));
  });
  afterAll(async () => {
    for (const a of attackers) a.close();
    await probe?.close();
    if (daemon && daemon.child.exitCode === null) {
      daemon.child.kill('SIGTERM');
      await bounded(daemon.exited, 15_000, 'serve stopped');
    }
  });

  /** Runs `setup` then `attack`, RSS sampled throughout and RLS probed during `attack`; checks both bounds; ends
   * every attacker made. */
  async function measured(tag: string, setup: () => Promise<void>, attack: () => Promise<void>): Promise<{ growthMb: number; p99: number }> {
    const pid = daemon.child.pid!;
    const before = rssMb(pid);
    let peak = before;
    const sample = setInterval(() => (peak = Math.max(peak, rssMb(pid))), 50);
    // Every attacker ended, the test failed or not: the next test's attackers are its own.
    const p99 = await setup()
      .then(() => probe.p99(tag, attack))
      .finally(() => {
        clearInterval(sample);
        for (const a of attackers.splice(0)) a.close();
      });
    console.log(`${tag}: RSS ${before.toFixed(0)} → peak ${peak.toFixed(0)} MB; RLS p99 ${p99.toFixed(1)} ms (idle ${idleP99.toFixed(1)} ms)`);
    expect(peak - before).toBeLessThan(GROWTH_BOUND_MB);
    expect(p99, `RLS p99 under attack against the idle ${idleP99.toFixed(1)} ms`).toBeLessThanOrEqual(underAttackBound(idleP99));
    await within(15_000, async () => (await gauge('tollgate_rlqs_streams')) === 0, 'the attack streams gone');
    return { growthMb: peak - before, p99 };
  }

  // A connection whose streams keep being refused is ended (server/hot-path.ts, 64 refusals): a flood of refused
  // streams costs its client its connections, the streams it held on them included, and each refusal no more than
  // its bytes.
  const cutOff = (): boolean => attackers.every((a) => a.session.closed || a.session.destroyed);

  it('silent streams from one address over 8 connections: at most 64 held, the rest refused, the connections ended', { timeout: 60_000 }, async () => {
    let held = 0;
    const endedBefore = await counter('tollgate_grpc_connections_refused_total', { reason: 'refusals' });
    await measured(
      'silent streams, one address',
      async () => {
        for (let c = 0; c < 8; c++) attackers.push(new Attacker(grpcPort, '127.0.0.90'));
        for (let i = 0; i < 16_000; i++) attackers[i % 8]!.open();
        await within(30_000, () => cutOff() || attackers.reduce((n, a) => n + a.ended, 0) >= 16_000 - 64, 'the streams past the bound refused');
      },
      async () => {
        held = await gauge('tollgate_rlqs_streams');
        await sleep(3000); // held silent, as long as a stream may be before it is ended (3 report intervals at 1 s)
      },
    );
    expect(held).toBeLessThanOrEqual(64);
    expect(await counter('tollgate_grpc_connections_refused_total', { reason: 'refusals' })).toBeGreaterThan(endedBefore);
  });

  it('silent streams from 100 addresses: 64 each at most', { timeout: 60_000 }, async () => {
    let held = 0;
    await measured(
      'silent streams, 100 addresses',
      async () => {
        for (let a = 1; a <= 100; a++) attackers.push(new Attacker(grpcPort, `127.0.1.${a}`));
        for (const a of attackers) for (let i = 0; i < 100; i++) a.open();
        await within(30_000, () => cutOff() || attackers.reduce((n, a) => n + a.ended, 0) >= 100 * (100 - 32), 'the streams past the bounds refused');
      },
      async () => {
        held = await gauge('tollgate_rlqs_streams');
        await sleep(3000);
      },
    );
    expect(held).toBeLessThanOrEqual(100 * 32);
  });

  it('64 streams × 10,000 buckets from one address, every second: 20,000 buckets held at most', { timeout: 90_000 }, async () => {
    let buckets = 0;
    const refusedBefore = await counter('tollgate_rlqs_buckets_refused_total', { reason: 'too_many_buckets' });
    await measured(
      '64 streams × 10,000 buckets',
      async () => undefined,
      async () => {
        attackers.push(new Attacker(grpcPort, '127.0.0.91'), new Attacker(grpcPort, '127.0.0.91'));
        const frames = Array.from({ length: 64 }, (_, s) =>
          frameOf(
            'rlqs-test',
            Array.from({ length: 10_000 }, (_, i) => ({ tenant: `b${s}-${i}` })),
          ),
        );
        const streams = frames.map((_, s) => attackers[s % 2]!.open());
        // Every second for 8 s, and on until the bound has refused buckets (at most 30 s in all): a machine slow
        // enough to read fewer than 20,000 buckets in 8 s never reached the bound, which is what this is about.
        const started = Date.now();
        const refused = async () => (await counter('tollgate_rlqs_buckets_refused_total', { reason: 'too_many_buckets' })) > refusedBefore;
        while (Date.now() - started < 8000 || (Date.now() - started < 30_000 && !(await refused()))) {
          for (const [i, s] of streams.entries()) s.write(frames[i]);
          await new Promise((r) => setTimeout(r, 1000));
          buckets = Math.max(buckets, await gauge('tollgate_rlqs_buckets'));
        }
      },
    );
    expect(buckets).toBeLessThanOrEqual(20_000);
    expect(buckets).toBeGreaterThan(0);
    expect(await counter('tollgate_rlqs_buckets_refused_total', { reason: 'too_many_buckets' })).toBeGreaterThan(refusedBefore);
  });

  it('one stream re-sending its 10,000-bucket report back to back: held back, then ended, within its share', { timeout: 60_000 }, async () => {
    const frame = frameOf(
      'rlqs-test',
      Array.from({ length: 10_000 }, (_, i) => ({ tenant: `r-${i}` })),
    );
    const pid = daemon.child.pid!;
    let answered = 0;
    let cpu = 0;
    const ms = 6000;
    const refusedBefore = await counter('tollgate_rlqs_stream_errors_total', { reason: 'too_many_reports' });
    await measured(
      'back-to-back reports',
      async () => undefined,
      async () => {
        const a = new Attacker(grpcPort, '127.0.0.92');
        attackers.push(a);
        const s = a.open();
        const cpuBefore = cpuSeconds(pid);
        const until = Date.now() + ms;
        let sent = 0;
        let ended = 0;
        // As a flooder does: a stream the server ends is opened again at once.
        let stream = s;
        while (Date.now() < until) {
          if (stream.closed || stream.destroyed || a.ended > ended) {
            ended = a.ended;
            stream = a.open();
          }
          if (stream.write(frame)) sent++;
          else await Promise.race([new Promise((r) => stream.once('drain', r)), new Promise((r) => stream.once('close', r)), sleep(200)]);
          if (sent % 4 === 0) await new Promise((r) => setImmediate(r));
        }
        cpu = (cpuSeconds(pid) - cpuBefore) / (ms / 1000);
        answered = a.answers.reduce((n, c) => n + c.messages, 0);
      },
    );
    console.log(`back-to-back reports: the process used ${(cpu * 100).toFixed(0)}% of a core; ${answered} answer messages`);
    expect(answered).toBeGreaterThan(0);
    // RLQS_CPU_SHARE (25%), with the probe's RLS calls and the frames read beside it: not the 113% of a core one
    // such stream took before.
    expect(cpu).toBeLessThan(0.6);
    expect(await counter('tollgate_rlqs_stream_errors_total', { reason: 'too_many_reports' })).toBeGreaterThan(refusedBefore);
  });
});
