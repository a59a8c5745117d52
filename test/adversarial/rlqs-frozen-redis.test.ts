import { readFileSync } from 'node:fs';
import http2 from 'node:http2';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeReport } from '../helpers/envoy-rlqs.js';
import { MessageCounter } from '../helpers/grpc-frames.js';
import { metric, scrape } from '../helpers/metrics.js';
import { type Daemon, freePort, loopback, startCli } from '../helpers/process.js';
import { type RedisServer, startRedis } from '../helpers/redis.js';
import { RlsClient } from '../helpers/service.js';
import { bounded, sleep, within } from '../helpers/time.js';

// A served process whose Redis freezes (SIGSTOP: the connection stays up, nothing answers), then 4 Envoy instances
// reporting 5,000 buckets each every second: RLQS must stop calling Redis as RLS does, so its memory stays bounded,
// and RLS calls keep being answered at once meanwhile (from local counters: --redis-failure local). Redis freezes
// before the reports start (answering 20,000 buckets a second while Redis is healthy takes about a core, more than
// a shared test machine may have): what is measured is what a frozen Redis costs.

const INSTANCES = 4;
const BUCKETS = 5000;
const FROZEN_MS = 8000;
const GROWTH_BOUND_MB = 300;

/** RLS calls one after another for `ms` (20 ms apart), each answered by its decision: their 99th percentile. */
async function latencies(call: () => Promise<{ overall_code: string }>, ms: number): Promise<{ p99: number; n: number }> {
  const took: number[] = [];
  const until = Date.now() + ms;
  while (Date.now() < until) {
    const start = performance.now();
    const res = await call();
    took.push(performance.now() - start);
    expect(res.overall_code).toBe('OK'); // decided, from local counters while Redis is frozen (--redis-failure local)
    await sleep(20);
  }
  took.sort((a, b) => a - b);
  return { p99: took[Math.floor(took.length * 0.99)]!, n: took.length };
}

function rssMb(pid: number): number {
  const kb = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]!;
  return Number(kb) / 1024;
}

/** One Envoy instance's stream from its own address, reporting every bucket each second (one report, encoded
 * once); as Envoy, it opens the stream again at its next report when the server ended it. Answers are counted (by
 * message) and dropped, so this test process stays light beside the server it measures. */
class Reporter {
  private session: http2.ClientHttp2Session | undefined;
  private stream: http2.ClientHttp2Stream | undefined;
  private readonly frame: Buffer;
  private timer: NodeJS.Timeout | undefined;
  /** Answers read, by message, over every stream this reporter opened. */
  private readonly counters: MessageCounter[] = [];
  get answers(): number {
    return this.counters.reduce((n, c) => n + c.messages, 0);
  }
  opened = 0;

  constructor(
    private readonly port: number,
    private readonly n: number,
  ) {
    const usages = Array.from({ length: BUCKETS }, (_, i) => ({
      bucket_id: { bucket: { tenant: `frozen-${n}-${i}` } },
      time_elapsed: { seconds: 1 },
      num_requests_allowed: 3,
    }));
    const body = encodeReport('rlqs-test', usages);
    this.frame = Buffer.alloc(5 + body.length);
    this.frame.writeUInt32BE(body.length, 1);
    body.copy(this.frame, 5);
  }

  start(): void {
    this.report();
    this.timer = setInterval(() => this.report(), 1000);
  }

  private report(): void {
    if (!this.stream || this.stream.closed) this.connect();
    this.stream!.write(this.frame);
  }

  private connect(): void {
    this.session?.destroy();
    const { port } = this;
    this.session = http2.connect(`http://127.0.0.1:${port}`, {
      createConnection: () => net.connect({ host: '127.0.0.1', port, localAddress: `127.0.0.${80 + this.n}` }),
    });
    this.session.on('error', () => undefined);
    this.stream = this.session.request({
      ':method': 'POST',
      ':path': '/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas',
      'content-type': 'application/grpc',
      te: 'trailers',
    });
    this.stream.on('error', () => undefined);
    const counter = new MessageCounter();
    this.counters.push(counter);
    this.stream.on('data', (d: Buffer) => counter.add(d));
    this.opened++;
  }

  close(): void {
    clearInterval(this.timer);
    this.stream?.close();
    this.session?.destroy();
  }
}

describe('RLQS with a frozen Redis, 4 instances × 5,000 buckets a second', () => {
  let redis: RedisServer;
  let daemon: Daemon;
  let rls: RlsClient;
  let httpPort: number;
  const reporters: Reporter[] = [];
  beforeAll(async () => {
    redis = await startRedis();
    const grpcPort = await freePort();
    httpPort = await freePort();
    const args = ['serve', '--store', 'redis', '--redis-url', redis.url, '--redis-failure', 'local', '--config', 'test/fixtures/rlqs'];
    daemon = await startCli([...args, '--rlqs-report-interval', '1s', ...loopback(grpcPort, httpPort)], /tollgate serving/);
    rls = new RlsClient(grpcPort);
    for (let n = 0; n < INSTANCES; n++) reporters.push(new Reporter(grpcPort, n));
  });
  afterAll(async () => {
    for (const r of reporters) r.close();
    rls?.close();
    redis?.signal('SIGCONT');
    if (daemon && daemon.child.exitCode === null) {
      daemon.child.kill('SIGTERM');
      await bounded(daemon.exited, 15_000, 'serve stopped');
    }
    await redis?.stop();
  });

  it('keeps RSS growth under 300 MiB and answers RLS within 50 ms at p99', { timeout: 60_000 }, async () => {
    const pid = daemon.child.pid!;
    const call = () => rls.call({ domain: 'rlqs-test', descriptors: [{ entries: [{ key: 'tenant', value: `rls-${Math.floor(Math.random() * 50)}` }] }] });
    // Redis healthy, no RLQS: what an RLS call takes on this machine now, the yardstick below.
    const idle = await latencies(call, 2000);
    const before = rssMb(pid);
    const unanswered = async () => metric((await scrape(httpPort)).series, 'tollgate_rlqs_stream_errors_total', { reason: 'store_unavailable' }) ?? 0;

    // Redis freezes; RLS decisions find it out (their calls time out) and answer from local counters.
    redis.signal('SIGSTOP');
    await within(
      10_000,
      async () => {
        await call();
        return metric((await scrape(httpPort)).series, 'tollgate_store_degraded') === 1;
      },
      'the store degraded',
    );
    for (const r of reporters) r.start();
    let peak = before;
    const sample = setInterval(() => (peak = Math.max(peak, rssMb(pid))), 50);
    const frozen = await latencies(call, FROZEN_MS).finally(() => clearInterval(sample));
    console.log(
      `frozen redis under RLQS: RSS ${before.toFixed(0)} MB before, peak ${peak.toFixed(0)} MB; ` +
        `RLS p99 ${frozen.p99.toFixed(1)} ms over ${frozen.n} calls (${idle.p99.toFixed(1)} ms with no RLQS and Redis healthy)`,
    );
    expect(peak - before).toBeLessThan(GROWTH_BOUND_MB);
    // 50 ms, or on a machine already slower than that with no load of ours, no more than twice what it takes then.
    expect(frozen.p99).toBeLessThan(Math.max(50, 2 * idle.p99));
    // Every report while frozen is counted as unanswered (4 streams, one a second each).
    expect(await unanswered()).toBeGreaterThanOrEqual(INSTANCES * 3);
  });
});
