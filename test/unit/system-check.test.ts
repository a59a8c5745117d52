import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { describe, expect, it } from 'vitest';
// @ts-expect-error: a plain .mjs script without type declarations
import { kubectlPath } from '../../scripts/kubectl.mjs';
// @ts-expect-error: a plain .mjs script without type declarations
import { onPath } from '../../scripts/on-path.mjs';

interface Entry {
  program: string;
  package: string;
  for: string[];
  probe?: string[];
}
const list = (JSON.parse(readFileSync('scripts/system-programs.json', 'utf8')) as { programs: Entry[] }).programs;

/** Where a program is on this machine's PATH. */
function locate(name: string): string {
  const path = onPath(name);
  if (!path) throw new Error(`${name} is not on PATH (npm test's pretest should have installed it)`);
  return path;
}

/** Runs the check with a PATH holding only links to these programs. */
function checkWith(programs: string[]): { status: number | null; stderr: string } {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-path-'));
  for (const p of programs) symlinkSync(locate(p), join(dir, p));
  // kubectl is found apart (scripts/kubectl.mjs: Kustomize v5 comes from no Debian package): the one pretest found.
  const env = { PATH: dir, KUBECTL: kubectlPath() };
  const r = spawnSync(process.execPath, ['scripts/check-system.mjs', '--for', 'test', '--no-install'], { env, encoding: 'utf8' });
  return { status: r.status, stderr: r.stderr };
}

describe('the programs the benchmark starts are checked before it runs', () => {
  it('every program bench/*.mjs spawns by name is listed for bench', () => {
    const spawned = new Set<string>();
    for (const f of readdirSync('bench').filter((n) => n.endsWith('.mjs'))) {
      for (const m of readFileSync(join('bench', f), 'utf8').matchAll(/\bspawn(?:Sync)?\('([\w.-]+)'/g)) spawned.add(m[1]!);
    }
    expect(spawned.size).toBeGreaterThan(0);
    const listed = list.filter((p) => p.for.includes('bench')).map((p) => p.program);
    for (const program of spawned) expect(listed, `${program} is spawned by the benchmark`).toContain(program);
  });
});

describe('the system-program check before npm test', () => {
  // What a probe finds (a Python module) is not a program on PATH: checked below, apart.
  const needed = list.filter((p) => p.for.includes('test') && !p.probe);

  it('passes when every program the tests start is on PATH', () => {
    expect(checkWith(needed.map((p) => p.program))).toEqual({ status: 0, stderr: '' });
  });

  it.each(needed.map((p) => [p.program, p.package]))('names a missing %s and the command that installs it, in one line', (program, pkg) => {
    const { status, stderr } = checkWith(needed.map((p) => p.program).filter((p) => p !== program));
    expect(status).toBe(1);
    expect(stderr.trim().split('\n')).toHaveLength(1);
    expect(stderr).toContain(`needs ${program},`);
    expect(stderr).toContain(`apt-get install -y --no-install-recommends ${pkg}`);
    expect(stderr).not.toMatch(/\n\s+at /);
  });
});

describe('a system dependency found by a probe command (a Python module)', () => {
  /** The check run from a copy of scripts/ whose list holds one entry with this probe. */
  function probeWith(probe: string[], install?: { path: string }): { status: number | null; stderr: string } {
    const dir = mkdtempSync(join(tmpdir(), 'tollgate-probe-'));
    copyFileSync('scripts/check-system.mjs', join(dir, 'check-system.mjs'));
    for (const f of ['kubectl.mjs', 'on-path.mjs']) copyFileSync(join('scripts', f), join(dir, f));
    const entry = { program: 'python3 grpc', probe, package: 'python3-grpcio', for: ['test'] };
    writeFileSync(join(dir, 'system-programs.json'), JSON.stringify({ programs: [entry] }));
    const env = { PATH: install?.path ?? process.env.PATH, KUBECTL: kubectlPath() };
    const args = [join(dir, 'check-system.mjs'), '--for', 'test', ...(install ? [] : ['--no-install'])];
    const r = spawnSync(process.execPath, args, { env, encoding: 'utf8' });
    return { status: r.status, stderr: r.stderr };
  }

  // The check installs only as root; CI runs as root on a fresh machine, which is the case this guards.
  it.runIf(process.getuid?.() === 0)('after installing, asks the probe again, not PATH (a fresh machine passes)', () => {
    const bin = mkdtempSync(join(tmpdir(), 'tollgate-apt-'));
    const marker = join(bin, 'installed');
    // A stand-in apt-get: "installing" makes the probe pass.
    writeFileSync(join(bin, 'apt-get'), `#!/bin/sh\n[ "$1" = install ] && : > '${marker}'\nexit 0\n`, { mode: 0o755 });
    const r = probeWith(['/bin/sh', '-c', `test -e '${marker}'`], { path: `${bin}${delimiter}/bin${delimiter}/usr/bin` });
    expect(r.stderr).not.toContain('still not');
    expect(r.status).toBe(0);
  });

  it('passes when the probe exits 0, and names the package when it does not', () => {
    expect(probeWith([process.execPath, '-e', 'process.exit(0)'])).toEqual({ status: 0, stderr: '' });
    const missing = probeWith([process.execPath, '-e', 'process.exit(1)']);
    expect(missing.status).toBe(1);
    expect(missing.stderr).toContain('needs python3 grpc,');
    expect(missing.stderr).toContain('apt-get install -y --no-install-recommends python3-grpcio');
  });

  it('the shipped probe finds grpc for the python3 the C-core client test runs', () => {
    const shipped = list.find((p) => p.probe)!;
    expect(spawnSync(shipped.probe![0]!, shipped.probe!.slice(1)).status).toBe(0);
  });
});
