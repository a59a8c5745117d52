import { readFileSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { INFLIGHT_YAML, inventedTenants } from '../adversarial/inflight-attacks.mjs';
import { metric, scrape } from '../helpers/metrics.js';
import { type Daemon, freePort, loopback, startCli } from '../helpers/process.js';
import { configDir } from '../helpers/service.js';
import { sleep, within } from '../helpers/time.js';

// A burst grows V8's heap to what it allocated, and nothing shrinks it again in a quiet process (no garbage, no
// collection): 20 s of invented-tenant takes left RSS +240 MiB for good (src/heap-trim.ts). Once quiet, serve
// gives it back with one full collection.

const MB = 2 ** 20;
let daemon: Daemon | undefined;
afterEach(async () => {
  daemon?.child.kill('SIGKILL');
  await daemon?.exited;
  daemon = undefined;
});

const rssOf = (pid: number): number => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) * 1024;

describe('a heap grown by a burst', () => {
  it('is given back to the system once the process is quiet', async () => {
    const [grpc, http] = [await freePort(), await freePort()];
    const dir = configDir({ 'inflight.yaml': INFLIGHT_YAML });
    daemon = await startCli(['serve', '--config', dir, '--config-poll-ms', '0', '--heap-trim-ms', '250', ...loopback(grpc, http)], /tollgate serving/);
    const pid = daemon.child.pid!;
    const start = rssOf(pid);
    // Takes from invented tenants until RSS has grown by 160 MiB (~8 s here), at most 30 s.
    const ac = new AbortController();
    const problems: string[] = [];
    const grown = within(30_000, () => rssOf(pid) - start > 160 * MB, 'RSS grown by the burst').finally(() => ac.abort());
    await inventedTenants(grpc, ac.signal, { tag: 'trim', report: (p) => problems.push(p), stat: () => undefined, note: () => undefined });
    await grown;
    expect(problems).toEqual([]);
    const peak = rssOf(pid);
    // Quiet: within a few looks, one collection, and RSS well under the burst's.
    await within(20_000, async () => rssOf(pid) < peak - 96 * MB, 'RSS given back');
    const m = await scrape(http);
    expect(metric(m.series, 'tollgate_heap_trims')).toBeGreaterThanOrEqual(1);
    // Still serving, its state kept: the held slots are still held (a tenant's first take was its limit − 1).
    await sleep(10);
    expect(daemon.child.exitCode).toBeNull();
  }, 90_000);
});
