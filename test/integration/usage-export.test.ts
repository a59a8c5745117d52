import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { UsageFiles } from '../../src/control/usage-files.js';
import { fingerprint } from '../../src/fingerprint.js';
import { UsageStreams } from '../../src/store/usage-streams.js';
import { metric, scrape } from '../helpers/metrics.js';
import { CLI, runCli } from '../helpers/process.js';
import { type RedisServer, startRedis } from '../helpers/redis.js';
import { configDir, type RlsRequest, startTestService, type TestService } from '../helpers/service.js';
import { within } from '../helpers/time.js';

// The usage ledger end to end (issue 62, item 2): 5,000 streams of the shipped LLM example's model rule over two
// replicas, each settled on the replica that did not reserve it, one in ten settlements replayed, and Redis
// frozen (SIGSTOP) while 500 of them run: exactly 5,000 events, one per stream. Then `tollgate usage export`
// killed (SIGKILL) mid-way and started again on the same directory: the two files hold each event once, and the
// group has nothing left pending. And the exact crash window: events written but not acknowledged.

const STREAMS = 5000;
const PREFIX = 'ledger:';
const dir = configDir({ 'llm.yaml': readFileSync('examples/llm-budgets.yaml', 'utf8') });
const phase = (i: number, key: 'request_id' | 'settle_id', hits: number): RlsRequest => ({
  domain: 'llm',
  descriptors: [
    {
      entries: [
        { key: 'tenant', value: `t${i % 50}` },
        { key: 'model', value: 'gpt-4o' },
        { key, value: `s${i}` },
      ],
      hits_addend: { value: hits },
    },
  ],
});

/** Every line of every export file in `out`, parsed (a file is read whole once its exporter is done). */
function exported(out: string): { stream: string; id: string; rid: string }[] {
  return readdirSync(out).flatMap((f) =>
    readFileSync(join(out, f), 'utf8')
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as { stream: string; id: string; rid: string }),
  );
}

/** Lines written whole so far, while an exporter may be writing the next. */
function linesSoFar(out: string): number {
  return readdirSync(out).reduce((n, f) => n + (readFileSync(join(out, f), 'utf8').match(/\n/g)?.length ?? 0), 0);
}

describe('the usage ledger through two replicas, a frozen Redis and a killed exporter', () => {
  let redis: RedisServer;
  let a: TestService;
  let b: TestService;
  beforeAll(async () => {
    redis = await startRedis();
    const args = ['--store', 'redis', '--redis-url', redis.url, '--redis-timeout-ms', '200', '--redis-key-prefix', PREFIX];
    [a, b] = await Promise.all([startTestService({ configDir: dir, args }), startTestService({ configDir: dir, args })]);
  });
  afterAll(async () => {
    redis?.signal('SIGCONT');
    await Promise.all([a?.close(), b?.close()]);
    await redis?.stop();
  });
  const cli = ['--redis-url', '', '--redis-key-prefix', PREFIX];

  it('5,000 settled streams, replays and a freeze: 5,000 events, each once; the export resumes exactly', async () => {
    const stream = async (i: number): Promise<void> => {
      const [first, second] = i % 2 ? [a, b] : [b, a];
      await first.rls.call(phase(i, 'request_id', 1000)).catch(() => undefined); // timed out while frozen
      await second.rls.call(phase(i, 'settle_id', 900 + (i % 200))).catch(() => undefined);
      if (i % 10 === 0) await first.rls.call(phase(i, 'settle_id', 900 + (i % 200))).catch(() => undefined); // replayed
    };
    const run = async (from: number, to: number) => {
      for (let i = from; i < to; i += 100) await Promise.all(Array.from({ length: Math.min(100, to - i) }, (_, j) => stream(i + j)));
    };
    const waiting = async (s: TestService) => metric((await scrape(s.service.httpPort)).series, 'tollgate_settlements_waiting');
    await run(0, 2000);
    redis.signal('SIGSTOP');
    await run(2000, 2500);
    expect(((await waiting(a)) ?? 0) + ((await waiting(b)) ?? 0)).toBeGreaterThan(0); // settlements kept while it is frozen
    redis.signal('SIGCONT');
    await run(2500, STREAMS);
    await within(20_000, async () => (await waiting(a)) === 0 && (await waiting(b)) === 0, 'both queues sent');
    expect(Number(await redis.cli('XLEN', `${PREFIX}v2:usage`))).toBe(STREAMS);

    // The exporter, killed once it has written half (the kill lands wherever it is: between a batch's write and
    // its acknowledgement too), then started again on the same directory.
    const out = mkdtempSync(join(tmpdir(), 'usage-'));
    const args = ['usage', 'export', '--group', 'billing', '--out', out, '--batch', '50', ...cli];
    args[args.indexOf('--redis-url') + 1] = redis.url;
    const first = spawn(process.execPath, [CLI, ...args], { stdio: 'ignore' });
    await within(30_000, async () => linesSoFar(out) >= STREAMS / 2, 'half exported');
    first.kill('SIGKILL');
    await new Promise((r) => first.once('exit', r));
    const half = exported(out).length;
    expect(half).toBeLessThan(STREAMS);
    const second = await runCli(args);
    expect(second.code).toBe(0);
    const lines = exported(out);
    expect(readdirSync(out)).toHaveLength(2);
    expect(lines).toHaveLength(STREAMS);
    expect(new Set(lines.map((l) => `${l.stream}/${l.id}`)).size).toBe(STREAMS);
    expect(new Set(lines.map((l) => l.rid))).toEqual(new Set(Array.from({ length: STREAMS }, (_, i) => fingerprint(`s${i}`))));
    expect(await redis.cli('XPENDING', `${PREFIX}v2:usage`, 'billing')).toMatch(/^0\b/);
    // What every group has read and acknowledged is dropped from Redis: the ledger holds what waits for export.
    expect(Number(await redis.cli('XLEN', `${PREFIX}v2:usage`))).toBe(0);
    // Read through, nothing trimmed: the gauges say so.
    const { series } = await scrape(a.service.httpPort);
    expect([metric(series, 'tollgate_usage_waiting', { group: 'billing' }), metric(series, 'tollgate_usage_dropped', { group: 'billing' })]).toEqual([0, 0]);
  }, 120_000);

  it('events written but not acknowledged when the exporter stopped are acknowledged, not written again', async () => {
    for (let i = 0; i < 3; i++) await a.rls.call(phase(90_000 + i, 'settle_id', 10));
    const client = new Redis(redis.port);
    const streams = new UsageStreams(client, PREFIX);
    const key = `${PREFIX}v2:usage`;
    await streams.join(key, 'audit');
    // An exporter read two events and wrote them, and stopped before its acknowledgement.
    const out = mkdtempSync(join(tmpdir(), 'usage-'));
    const delivered = await streams.next([key], 'audit', 'pod-1', 2, 0);
    new UsageFiles(out, 'ndjson').write(delivered);
    const args = ['usage', 'export', '--group', 'audit', '--consumer', 'pod-1', '--out', out, ...cli];
    args[args.indexOf('--redis-url') + 1] = redis.url;
    const run = await runCli(args);
    expect(run.stderr).toContain('exported 1 usage events (2 found already written, acknowledged)');
    const lines = exported(out);
    expect(lines.map((l) => l.rid)).toEqual([0, 1, 2].map((i) => fingerprint(`s${90_000 + i}`)));
    expect(await redis.cli('XPENDING', key, 'audit')).toMatch(/^0\b/);
    // Pending entries the bound trimmed before they were written: acknowledged, counted, nothing to write.
    for (let i = 0; i < 3; i++) await a.rls.call(phase(91_000 + i, 'settle_id', 10));
    await streams.next([key], 'audit', 'pod-1', 10, 0);
    await redis.cli('XTRIM', key, 'MAXLEN', '0');
    const trimmed = await runCli(args);
    expect([trimmed.code, trimmed.stderr]).toEqual([0, expect.stringContaining('3 pending were trimmed')]);
    expect(await redis.cli('XPENDING', key, 'audit')).toMatch(/^0\b/);
    client.disconnect();
  }, 60_000);

  it('a key prefix with its own hash tag: the events are acknowledged on their stream', async () => {
    const args = ['--store', 'redis', '--redis-url', redis.url, '--redis-key-prefix', '{tg}:'];
    const s = await startTestService({ configDir: dir, args });
    try {
      for (let i = 0; i < 3; i++) await s.rls.call(phase(92_000 + i, 'settle_id', 10));
      const out = mkdtempSync(join(tmpdir(), 'usage-'));
      const run = await runCli(['usage', 'export', '--group', 'g', '--out', out, '--redis-url', redis.url, '--redis-key-prefix', '{tg}:']);
      expect([run.code, exported(out).length]).toEqual([0, 3]);
      expect(await redis.cli('XPENDING', '{tg}:v2:usage', 'g')).toMatch(/^0\b/);
    } finally {
      await s.close();
    }
  });
});

describe('the memory store ledger, exported through the admin API', () => {
  it('keeps the last USAGE_LEDGER_MAX_LEN, counts what it dropped unread, and resumes after what the files hold', async () => {
    const ADMIN = 'admin-credential-for-usage';
    const s = await startTestService({ configDir: dir, env: { TOLLGATE_ADMIN_TOKEN: ADMIN, USAGE_LEDGER_MAX_LEN: '100' } });
    try {
      for (let i = 0; i < 150; i++) await s.rls.call(phase(i, 'settle_id', 10));
      const out = mkdtempSync(join(tmpdir(), 'usage-'));
      const env = { TOLLGATE_ADMIN_TOKEN: ADMIN };
      const args = ['usage', 'export', '--out', out, '--format', 'csv', '--url', `http://127.0.0.1:${s.service.adminPort}`];
      expect((await runCli(args, env)).code).toBe(0);
      const rows = () =>
        readdirSync(out).flatMap((f) =>
          readFileSync(join(out, f), 'utf8')
            .split('\n')
            .filter((l) => /^mem-\d+,\d/.test(l)),
        );
      expect(rows()).toHaveLength(100); // the ring's last 100: events 51 to 150
      expect(rows()[0]!.split(',')[1]).toBe('51');
      expect(metric((await scrape(s.service.httpPort)).series, 'tollgate_usage_dropped', { group: '' })).toBe(50);
      for (let i = 150; i < 160; i++) await s.rls.call(phase(i, 'settle_id', 10));
      expect((await runCli(args, env)).stderr).toContain('exported 10 usage events');
      expect(new Set(rows().map((r) => r.split(',')[1])).size).toBe(110);
      const anonymous = await fetch(`http://127.0.0.1:${s.service.adminPort}/v1/usage`);
      expect(anonymous.status).toBe(401);
      // A restarted service's ring numbers from 1 again: it is a new stream, exported from its first event.
      await s.close();
      const again = await startTestService({ configDir: dir, env: { TOLLGATE_ADMIN_TOKEN: ADMIN, USAGE_LEDGER_MAX_LEN: '100' } });
      try {
        for (let i = 0; i < 5; i++) await again.rls.call(phase(i, 'settle_id', 10));
        args[args.length - 1] = `http://127.0.0.1:${again.service.adminPort}`;
        expect((await runCli(args, env)).stderr).toContain('exported 5 usage events');
      } finally {
        await again.close();
      }
    } finally {
      await s.close();
    }
  });
});
