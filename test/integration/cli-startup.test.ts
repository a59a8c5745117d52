import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { CLI } from '../helpers/process.js';

/** The commands that do not serve load what they need, not the service: `tollgate fingerprint` used to load
 * gRPC, Redis and tracing too (0.46 s a start against 0.10 s on Node 24), a cost every script and test that
 * runs it paid. Seen through the Node modules loaded (test/fixtures/preload/loaded-builtins.cjs). */
function builtinsLoadedBy(args: string[]): string[] {
  const run = spawnSync(process.execPath, ['--require', './test/fixtures/preload/loaded-builtins.cjs', CLI, ...args], { encoding: 'utf8', timeout: 15_000 });
  expect(run.status).toBe(0);
  return /loaded-builtins: (.*)/.exec(run.stderr)?.[1]?.split(' ') ?? [];
}

describe('a command that does not serve', () => {
  it.each([[['--version']], [['--help']], [['fingerprint', 'abc']]])('%j loads neither gRPC (node:http2) nor TLS', (args) => {
    const loaded = builtinsLoadedBy(args);
    expect(loaded).toContain('fs'); // the preload ran
    expect(loaded).not.toContain('http2');
    expect(loaded).not.toContain('tls');
  });

  it('serve loads them (the check sees what it looks for)', () => {
    const loaded = builtinsLoadedBy(['serve', '--help']);
    expect(loaded).toContain('http2');
    expect(loaded).toContain('tls');
  });
});
