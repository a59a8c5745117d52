import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metric, scrape } from '../helpers/metrics.js';
import { type Daemon, freePort, loopback, startCli } from '../helpers/process.js';
import { RlsClient, type RlsRequest } from '../helpers/service.js';

/** Resident memory of a process, in MB, from /proc. */
function rssMb(pid: number): number {
  const kb = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]!;
  return Number(kb) / 1024;
}

/** Runs `make(i)` for i < n, `width` calls at a time. */
async function flood(n: number, width: number, make: (i: number) => Promise<unknown>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < n) await make(next++);
    }),
  );
}

const big = (i: number, tag: string): string => `${tag}${i}-`.padEnd(8 * 1024, 'x');

// The bound docs/operations.md states: the counters (--max-counters of at most ~1.2 KB each), the fingerprint memo
// (2 M characters) and the over-limit cache stay within it however large and many the request values are. RSS
// also holds garbage the runtime has not collected yet: the daemon is started as anyone starts it, so it runs
// with the heap flag serve gives itself (src/heap-flags.ts: +105-120 MB on Node 24 with it; 200-250 MB without,
// 280 MB and growing with the count before the bounds).
const GROWTH_BOUND_MB = 170;

describe('memory stays bounded under distinct large values', () => {
  let daemon: Daemon;
  let rls: RlsClient;
  let httpPort: number;
  beforeAll(async () => {
    const grpcPort = await freePort();
    httpPort = await freePort();
    daemon = await startCli(['serve', '--max-counters', '1000', ...loopback(grpcPort, httpPort)], /tollgate serving/);
    rls = new RlsClient(grpcPort);
  });
  afterAll(async () => {
    rls?.close();
    daemon?.child.kill('SIGTERM');
    await daemon?.exited;
  });

  it('holds 12,000 distinct 8 KB tokens and 400 overrides with 16 × 8 KB keys within the bound', async () => {
    const pid = daemon.child.pid!;
    const read = (token: string): RlsRequest => ({
      domain: 'property-api',
      descriptors: [
        {
          entries: [
            { key: 'category', value: 'read' },
            { key: 'token', value: token },
          ],
        },
      ],
    });
    await flood(200, 20, (i) => rls.call(read(`warm-${i}`)));
    const before = rssMb(pid);

    await flood(12_000, 50, (i) => rls.call(read(big(i, 'tok'))));
    const override = (i: number): RlsRequest => ({
      domain: 'property-api',
      descriptors: [
        { entries: Array.from({ length: 16 }, (_, j) => ({ key: big(i * 16 + j, 'key'), value: 'v' })), limit: { requests_per_unit: 5, unit: 'HOUR' } },
      ],
    });
    await flood(400, 10, (i) => rls.call(override(i)));
    const after = rssMb(pid);

    const { series } = await scrape(httpPort);
    expect(metric(series, 'tollgate_memory_store_counters')).toBeLessThanOrEqual(1000);
    console.log(`memory bound: RSS ${before.toFixed(0)} MB before, ${after.toFixed(0)} MB after (bound: +${GROWTH_BOUND_MB} MB)`);
    expect(after - before).toBeLessThan(GROWTH_BOUND_MB);
    expect(daemon.child.exitCode).toBeNull();
  });
});
