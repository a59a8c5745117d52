import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { closeSync, constants, mkdtempSync, openSync, readSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { CLI, freePort, loopback } from '../helpers/process.js';
import { bounded, within } from '../helpers/time.js';

/** Issue 36, item 4: SIGTERM ends `serve` within --shutdown-timeout-ms whatever its log output does. Before,
 * pino's exit-time flushSync retried EPIPE forever (a log reader that went away), and a blocking pipe nobody
 * read held its thread-pool write, which process.exit waits for: the process never exited. */

const TIMEOUT_MS = 1000;
/** The shutdown timeout, plus starting and ending a Node.js process on a machine shared with other tests. */
const EXIT_WITHIN_MS = TIMEOUT_MS + 6000;

let children: ChildProcess[] = [];
afterEach(() => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  children = [];
});

function serve(stdout: 'pipe' | number, grpcPort: number, httpPort: number, format = 'json'): { child: ChildProcess; exited: Promise<number | null> } {
  const args = ['serve', ...loopback(grpcPort, httpPort), '--shutdown-timeout-ms', String(TIMEOUT_MS), '--log-level', 'debug', '--log-format', format];
  const child = spawn(process.execPath, [CLI, ...args], { stdio: ['ignore', stdout, 'pipe'], env: { ...process.env, DECISION_LOG: 'all' } });
  children.push(child);
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, exited };
}

const healthy = async (httpPort: number): Promise<boolean> => {
  try {
    return (await fetch(`http://127.0.0.1:${httpPort}/healthz`)).status === 200;
  } catch {
    return false;
  }
};

/** `n` decisions through /json, 10 at a time: each writes a debug line and a decision-log line that list its
 * 50 descriptors (~9 KB in all). */
async function decisions(httpPort: number, n: number): Promise<void> {
  const descriptors = Array.from({ length: 50 }, () => ({ entries: [{ key: 'category', value: 'read' }] }));
  const body = JSON.stringify({ domain: 'property-api', descriptors });
  for (let i = 0; i < n; i += 10)
    await Promise.all(Array.from({ length: 10 }, () => fetch(`http://127.0.0.1:${httpPort}/json`, { method: 'POST', body }).then((r) => r.text())));
}

describe('SIGTERM whatever the log output does', () => {
  it('stdout and stderr readers gone just before SIGTERM (EPIPE on the last lines): exits 0', async () => {
    const [grpcPort, httpPort] = [await freePort(), await freePort()];
    const { child, exited } = serve('pipe', grpcPort, httpPort, 'json');
    let out = '';
    child.stdout!.on('data', (d: Buffer) => (out += d));
    await within(15_000, () => out.includes('tollgate serving'), 'serving');
    child.stdout!.destroy();
    child.stderr!.destroy();
    child.kill('SIGTERM');
    expect(await bounded(exited, EXIT_WITHIN_MS, 'exit after SIGTERM')).toBe(0);
  });

  it('stdout and stderr readers gone while serving: it keeps serving, then exits 0 on SIGTERM', async () => {
    const [grpcPort, httpPort] = [await freePort(), await freePort()];
    const { child, exited } = serve('pipe', grpcPort, httpPort, 'text');
    let out = '';
    child.stdout!.on('data', (d: Buffer) => (out += d));
    await within(15_000, () => out.includes('tollgate serving'), 'serving');
    child.stdout!.destroy();
    child.stderr!.destroy();
    // Lines written into the broken pipes: the service neither stops nor crashes.
    await decisions(httpPort, 10);
    expect(await healthy(httpPort)).toBe(true);
    expect(child.exitCode).toBeNull();
    child.kill('SIGTERM');
    expect(await bounded(exited, EXIT_WITHIN_MS, 'exit after SIGTERM')).toBe(0);
  });

  it('stdout a blocking pipe nobody reads, full: exits 0 on SIGTERM within the shutdown timeout', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tollgate-fifo-'));
    const fifo = join(dir, 'stdout');
    execFileSync('mkfifo', [fifo]);
    // A FIFO as a container runtime's or a shell's pipe: blocking for the writer; this end holds it open and
    // reads nothing until the service has exited.
    const reader = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK);
    const writer = openSync(fifo, constants.O_WRONLY);
    try {
      const [grpcPort, httpPort] = [await freePort(), await freePort()];
      const { child, exited } = serve(writer, grpcPort, httpPort);
      closeSync(writer);
      await within(15_000, () => healthy(httpPort), 'serving');
      await decisions(httpPort, 40); // ~360 KB of log lines for a 64 KiB pipe
      expect(await healthy(httpPort)).toBe(true);
      child.kill('SIGTERM');
      expect(await bounded(exited, EXIT_WITHIN_MS, 'exit after SIGTERM')).toBe(0);
      // The pipe was full when it exited: what it holds is from the first decisions, not the last lines.
      const held = Buffer.alloc(1 << 20);
      const n = readSync(reader, held, 0, held.length, null);
      expect(n).toBeGreaterThanOrEqual(4096);
      expect(held.subarray(0, n).toString()).not.toContain('tollgate stopped');
    } finally {
      closeSync(reader);
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
