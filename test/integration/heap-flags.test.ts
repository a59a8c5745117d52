import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { heapFlags, missingHeapFlags } from '../../src/heap-flags.js';
import { freePort, loopback, startCli } from '../helpers/process.js';

/** `serve` runs with the heap settings its memory bound is measured with (src/heap-flags.ts), whoever starts it,
 * and leaves an operator's own value of one alone. */

const cmdline = (pid: number): string[] => readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
/** The environment the process runs with now (after an execve, the one it was given). */
const environ = (pid: number): string[] => readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0').filter(Boolean);
const canExec = typeof (process as unknown as { execve?: unknown }).execve === 'function';

/** The daemon's command line, and whether it replaced itself (the mark heap-flags.ts sets for the new process). */
async function serveArgv(env: NodeJS.ProcessEnv = {}): Promise<string[] & { reexecuted?: boolean }> {
  const daemon = await startCli(['serve', ...loopback(await freePort(), await freePort())], /tollgate serving/, env);
  try {
    const argv: string[] & { reexecuted?: boolean } = cmdline(daemon.child.pid!);
    argv.reexecuted = environ(daemon.child.pid!).some((e) => e.startsWith('TOLLGATE_HEAP_FLAGS_SET='));
    return argv;
  } finally {
    daemon.child.kill('SIGTERM');
    await daemon.exited;
  }
}

describe('the heap flags serve runs with', () => {
  it('are per Node line: pretenuring off from Node 24 on, where V8 comes to pretenure node:http2 streams', () => {
    expect(heapFlags('v24.21.0')).toEqual(['--max-semi-space-size=16', '--no-allocation-site-pretenuring', '--expose-gc']);
    expect(heapFlags('v25.0.0')).toEqual(['--max-semi-space-size=16', '--no-allocation-site-pretenuring', '--expose-gc']);
    expect(heapFlags('v22.23.3')).toEqual(['--max-semi-space-size=16', '--expose-gc']);
    expect(heapFlags(process.version)).toEqual(heapFlags());
  });

  it('are missing exactly when neither the command line nor NODE_OPTIONS gives them', () => {
    const all = heapFlags('v24.21.0');
    const missing = (argv: string[], options?: string) => missingHeapFlags(argv, options, all);
    expect(missing([])).toEqual(all);
    expect(missing(all)).toEqual([]);
    expect(missing(['--max-semi-space-size=4', '--no-allocation-site-pretenuring', '--no-expose-gc'])).toEqual([]);
    expect(missing(['--no-allocation-site-pretenuring'], '--max-old-space-size=512 --max_semi_space_size=8 --expose_gc')).toEqual([]);
    expect(missing([], '--max-old-space-size=512')).toEqual(all);
    expect(missing(['--max-semi-space-size=16'])).toEqual(['--no-allocation-site-pretenuring', '--expose-gc']);
    expect(missingHeapFlags([], '', heapFlags('v22.23.3'))).toEqual(['--max-semi-space-size=16', '--expose-gc']);
  });

  it("take an operator's pretenuring choice, either way and in any of V8's spellings, as given", () => {
    const missing = (argv: string[]) => missingHeapFlags(argv, '', heapFlags('v24.21.0'));
    // An operator who wants V8's allocation-site pretenuring back says so on the command line: it is not undone.
    for (const given of [
      '--allocation-site-pretenuring',
      '--no-allocation_site_pretenuring',
      '--noallocation-site-pretenuring',
      '-allocation-site-pretenuring',
    ])
      expect(missing([given])).toEqual(['--max-semi-space-size=16', '--expose-gc']);
  });

  it.skipIf(!canExec)('are added to a plain `node dist/cli.js serve`, in the same process', async () => {
    const argv = await serveArgv();
    for (const flag of heapFlags()) expect(argv).toContain(flag);
    expect(argv.filter((a) => a.endsWith('cli.js'))).toHaveLength(1);
    expect(argv.reexecuted).toBe(true);
  });

  it.skipIf(!canExec)("keep an operator's --allocation-site-pretenuring through the re-execution", async () => {
    const daemon = await startCli(['serve', ...loopback(await freePort(), await freePort())], /tollgate serving/, {}, ['--allocation-site-pretenuring']);
    try {
      const argv = cmdline(daemon.child.pid!);
      expect(argv).toContain('--allocation-site-pretenuring');
      expect(argv).toContain('--max-semi-space-size=16');
      expect(argv).not.toContain('--no-allocation-site-pretenuring');
    } finally {
      daemon.child.kill('SIGTERM');
      await daemon.exited;
    }
  });

  it.skipIf(!canExec)("leave an operator's NODE_OPTIONS value in place", async () => {
    const argv = await serveArgv({ NODE_OPTIONS: '--max-semi-space-size=8' });
    expect(argv).not.toContain('--max-semi-space-size=16');
    // Only what NODE_OPTIONS cannot carry (pretenuring, on Node 24+) was added; with nothing else, nothing was.
    const rest = heapFlags().filter((f) => !f.startsWith('--max-semi-space-size'));
    for (const flag of rest) expect(argv).toContain(flag);
    expect(argv.reexecuted).toBe(rest.length > 0);
  });

  it.skipIf(!canExec)('leave a process that was given every one as it started', async () => {
    const daemon = await startCli(['serve', ...loopback(await freePort(), await freePort())], /tollgate serving/, {}, heapFlags());
    try {
      expect(environ(daemon.child.pid!).some((e) => e.startsWith('TOLLGATE_HEAP_FLAGS_SET='))).toBe(false);
    } finally {
      daemon.child.kill('SIGTERM');
      await daemon.exited;
    }
  });
});
