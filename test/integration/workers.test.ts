import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metric, scrape } from '../helpers/metrics.js';
import { type Daemon, freePort, loopback, runCli, startCli } from '../helpers/process.js';
import { type RedisServer, startRedis } from '../helpers/redis.js';
import { property, RlsClient } from '../helpers/service.js';
import { bounded, within } from '../helpers/time.js';

describe('serve --workers 2 (Redis store)', () => {
  let redis: RedisServer;
  let daemon: Daemon;
  let grpcPort: number;
  let httpPort: number;
  beforeAll(async () => {
    redis = await startRedis();
    [grpcPort, httpPort] = [await freePort(), await freePort()];
    daemon = await startCli(
      ['serve', '--workers', '2', '--store', 'redis', '--redis-url', redis.url, ...loopback(grpcPort, httpPort)],
      /tollgate serving[\s\S]*tollgate serving/,
    );
  });
  afterAll(async () => {
    if (daemon && daemon.child.exitCode === null) {
      daemon.child.kill('SIGTERM');
      await bounded(daemon.exited, 10_000, 'workers stopped');
    }
    await redis?.stop();
  });

  it('two processes answer on one port, share the counters, and /metrics on either counts every call', async () => {
    expect(daemon.output().match(/tollgate serving/g)).toHaveLength(2);
    // A connection each, so node:cluster can hand them to either worker.
    const clients = Array.from({ length: 8 }, (_, i) => new RlsClient(grpcPort, { 'grpc.tollgate_test_connection': i }));
    const token = `Bearer workers-${Math.random()}`;
    const codes = await Promise.all(Array.from({ length: 40 }, (_, i) => clients[i % 8]!.call(property('reports', token)).then((r) => r.overall_code)));
    for (const c of clients) c.close();
    // One shared counter (reports: 2 a second), whichever worker answered: at most 2 a second admitted.
    expect(codes.filter((c) => c === 'OK').length).toBeGreaterThanOrEqual(2);
    expect(codes.filter((c) => c === 'OK').length).toBeLessThanOrEqual(6);
    // Each scrape lands on one worker, which answers for both.
    for (let i = 0; i < 4; i++) {
      const { series } = await scrape(httpPort);
      const ok = metric(series, 'tollgate_requests_total', { domain: 'property-api', result: 'ok' }) ?? 0;
      const over = metric(series, 'tollgate_requests_total', { domain: 'property-api', result: 'over_limit' }) ?? 0;
      expect(ok + over).toBe(40);
    }
  });

  it('gauges are one value across workers, as their meaning asks, not a sum', async () => {
    const { series } = await scrape(httpPort);
    expect(metric(series, 'tollgate_store_degraded', { store: 'redis' })).toBe(0);
    expect([...series].filter(([k]) => k.startsWith('tollgate_build_info{')).map(([, v]) => v)).toEqual([1]);
    expect([...series].filter(([k]) => k.startsWith('tollgate_config_info{')).map(([, v]) => v)).toEqual([1]);
    const loadedAt = metric(series, 'tollgate_config_last_success_timestamp_seconds', {})!;
    expect(loadedAt).toBeGreaterThan(1.7e9);
    expect(loadedAt).toBeLessThan(Date.now() / 1000 + 1); // not the sum of two timestamps
  });

  it('a worker that dies is started again, and calls keep being answered meanwhile', async () => {
    const total = async (): Promise<number> => {
      const { series } = await scrape(httpPort);
      return ['ok', 'over_limit'].reduce((n, result) => n + (metric(series, 'tollgate_requests_total', { domain: 'property-api', result }) ?? 0), 0);
    };
    // Wait for the primary's periodic snapshot to hold both workers' counts before one dies.
    await within(10_000, async () => (await total()) === 40, 'both workers counted');
    const workers = [...daemon.output().matchAll(/"worker":(\d+)/g)].map((m) => Number(m[1]));
    expect(workers).toHaveLength(2);
    process.kill(workers[0]!, 'SIGKILL');
    await within(10_000, () => (daemon.output().match(/tollgate serving/g) ?? []).length === 3);
    expect(daemon.output()).toContain('worker exited');
    const clients = Array.from({ length: 4 }, (_, i) => new RlsClient(grpcPort, { 'grpc.tollgate_test_connection': 100 + i }));
    const codes = await Promise.all(clients.map((c) => c.call(property('read', `Bearer after-${Math.random()}`)).then((r) => r.overall_code)));
    for (const c of clients) c.close();
    expect(codes).toEqual(['OK', 'OK', 'OK', 'OK']);
    // The dead worker's calls are still counted: a counter never goes down when a worker is replaced.
    for (let i = 0; i < 4; i++) expect(await total()).toBe(44);
  });

  it('SIGTERM stops every worker and the primary exits 0', async () => {
    daemon.child.kill('SIGTERM');
    expect(await bounded(daemon.exited, 10_000, 'the primary exited after SIGTERM')).toBe(0);
    expect(daemon.output().match(/tollgate stopped/g)).toHaveLength(2); // the two living workers
  });
});

describe('--workers in a crash loop', () => {
  it('stops after too many exits in a minute and exits 1, so a supervisor sees the failure', async () => {
    const redis = await startRedis();
    const busy = await freePort();
    const { createServer } = await import('node:net');
    const holder = createServer().listen(busy, '127.0.0.1');
    try {
      // Every worker fails to bind the port the holder keeps, and exits.
      const run = await runCli(
        [
          'serve',
          '--workers',
          '2',
          '--store',
          'redis',
          '--redis-url',
          redis.url,
          '--grpc-host',
          '127.0.0.1',
          '--grpc-port',
          String(busy),
          '--http-port',
          String(await freePort()),
        ],
        {},
        60_000,
      ); // a crash loop's restarts back off: on a busy machine they take longer than the default 15 s
      expect(run.code).toBe(1);
      expect(run.stdout + run.stderr).toContain('workers keep exiting');
    } finally {
      holder.close();
      await redis.stop();
    }
  }, 70_000);
});

describe('--workers with the memory store', () => {
  it('is refused in one line: each worker would admit the whole limit', async () => {
    const run = await runCli(['serve', '--workers', '2']);
    expect(run.code).not.toBe(0);
    expect(run.stderr.trim().split('\n')).toHaveLength(1);
    expect(run.stderr).toContain('--workers 2 needs --store redis');
  });
});
