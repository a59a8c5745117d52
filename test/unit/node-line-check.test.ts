import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

/** `npm test` under a Node.js line engines does not name stops at once, with one line saying which lines are
 * supported and how to get one (scripts/check-node-line.mjs, issue 59); .ci/run, which runs
 * scripts/check-system.mjs on whatever node the machine has, never meets it. */

/** The check as pretest runs it, `version` standing in for the node's own. */
function check(version: string): { status: number | null; stdout: string; stderr: string } {
  const env = { ...process.env, TOLLGATE_NODE_VERSION_FOR_TEST: version };
  const r = spawnSync(process.execPath, ['scripts/check-node-line.mjs'], { env, encoding: 'utf8' });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

const pkg = JSON.parse(readFileSync('package.json', 'utf8')) as { engines: { node: string }; scripts: Record<string, string> };
const pinned = (JSON.parse(readFileSync('scripts/node-lines.json', 'utf8')) as { lines: { version: string }[] }).lines[0]!.version;

describe('the Node.js line check before npm test', () => {
  it.each(['v20.20.2', '22.11.0', 'v18.20.8', 'v26.0.0'])('refuses %s in one line naming the lines and how to get one, exit 1', (version) => {
    const r = check(version);
    expect(r.status).toBe(1);
    expect(r.stdout).toBe('');
    const lines = r.stderr.trimEnd().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toBe(
      `tollgate: Node.js v${version.replace(/^v/, '')} is not supported; use Node.js 22 (>= 22.12) or 24 (engines in package.json): e.g. ` +
        `PATH="$(node scripts/node-lines.mjs bin ${pinned}):$PATH" npm test (fetches the pinned ${pinned}), or nvm install 24`,
    );
  });

  it.each(['v22.12.0', '22.23.3', 'v24.0.0', pinned])('lets %s through, silently', (version) => {
    expect(check(version)).toEqual({ status: 0, stdout: '', stderr: '' });
  });

  it('is what the line names as engines, and pretest runs it first; .ci/run does not run it', () => {
    expect(pkg.engines.node).toBe('^22.12.0 || ^24.0.0');
    expect(pkg.scripts.pretest).toMatch(/^node scripts\/check-node-line\.mjs && /);
    // Its commands, not its comments: none runs npm test (whose pretest runs the check) or the check itself.
    const ci = readFileSync('.ci/run', 'utf8')
      .split('\n')
      .filter((line) => !line.trimStart().startsWith('#'))
      .join('\n');
    expect(ci).toContain('node scripts/check-system.mjs');
    expect(ci).not.toContain('check-node-line');
    expect(ci).not.toMatch(/\bnpm (test|run test)\b/);
    expect(readFileSync('scripts/check-system.mjs', 'utf8')).not.toContain('check-node-line');
  });
});
