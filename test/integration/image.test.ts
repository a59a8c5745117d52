import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { validate } from 'dockerfile-utils';
import { describe, expect, it } from 'vitest';
import { SERVE_OPTIONS } from '../../src/settings/settings.js';
import { freePort } from '../helpers/process.js';
import { within } from '../helpers/time.js';

// No Docker engine here: the Dockerfile is linted (dockerfile-utils, the parser and validator of VS Code's Docker
// support) and held to the project's image policy, each rule a small check that names what it found; the
// /bin/ratelimit shim is run; and `serve` is started with a read-only root filesystem, as the manifests run it.

const DOCKERFILE = readFileSync('Dockerfile', 'utf8');
const SUPPORTED_NODE_LINES = [22, 24];
// biome-ignore lint/suspicious/noTemplateCurlyInString: a Dockerfile's own ARG reference, not a JavaScript template
const BASE_REF = '${NODE_IMAGE}';

/** The instructions as [keyword, arguments], continuation lines joined, comments dropped. */
function instructions(text: string): [string, string][] {
  return text
    .replace(/\\\n/g, ' ')
    .split('\n')
    .filter((l) => l.trim() && !l.trimStart().startsWith('#'))
    .map((l) => {
      const [keyword, ...rest] = l.trim().split(/\s+/);
      return [keyword!.toUpperCase(), rest.join(' ')];
    });
}

/** The image policy: each entry returns what is wrong (empty: nothing). */
const POLICY: Record<string, (text: string) => string[]> = {
  'the base is one ARG pinned by digest, on a supported Node LTS line': (text) => {
    const arg = /^ARG NODE_IMAGE=(\S+)$/m.exec(text)?.[1];
    if (!arg) return ['no ARG NODE_IMAGE=… default'];
    const m = /^node:(\d+)[\w.-]*@sha256:[0-9a-f]{64}$/.exec(arg);
    if (!m) return [`NODE_IMAGE ${arg} is not node:<line>…@sha256:<digest>`];
    return SUPPORTED_NODE_LINES.includes(Number(m[1])) ? [] : [`Node ${m[1]} is not a supported LTS line (${SUPPORTED_NODE_LINES.join(', ')})`];
  },
  'every FROM is the pinned base or an earlier stage': (text) => {
    const stages: string[] = [];
    const wrong: string[] = [];
    for (const [, args] of instructions(text).filter(([k]) => k === 'FROM')) {
      const [image, , name] = args.split(/\s+/);
      if (image !== BASE_REF && !stages.includes(image!)) wrong.push(`FROM ${image}`);
      if (name) stages.push(name);
    }
    return wrong;
  },
  'no moving tag': (text) => (/:latest\b/.test(text) ? ['a :latest tag'] : []),
  'the last USER is numeric and not root': (text) => {
    const users = instructions(text).filter(([k]) => k === 'USER');
    const last = users.at(-1)?.[1];
    return last && /^[1-9]\d*(:\d+)?$/.test(last) ? [] : [`last USER is ${last ?? 'absent'}`];
  },
  'the build stage installs from the lockfile (npm ci)': (text) =>
    /\bnpm install\b/.test(text) || !/\bnpm ci\b/.test(text) ? ['npm install instead of npm ci'] : [],
  'schema/ and examples/ are in the image': (text) =>
    ['schema', 'examples'].filter((d) => !new RegExp(`^COPY ${d} \\./${d}$`, 'm').test(text)).map((d) => `${d}/ not copied`),
  'every COPY source exists and is not excluded by .dockerignore': (text) => {
    const ignored = readFileSync('.dockerignore', 'utf8').split('\n').filter(Boolean);
    const sources = instructions(text).filter(([k, a]) => k === 'COPY' && !a.startsWith('--from'));
    return sources.flatMap(([, a]) => a.split(/\s+/).slice(0, -1)).filter((src) => !existsSync(src) || ignored.includes(src));
  },
};

describe('Dockerfile', () => {
  it('has no problem dockerfile-utils finds (syntax, instructions, arguments)', () => {
    expect(validate(DOCKERFILE).map((d) => `${d.range.start.line + 1}: ${d.message}`)).toEqual([]);
  });

  it.each(Object.keys(POLICY))('%s', (rule) => {
    expect(POLICY[rule]!(DOCKERFILE)).toEqual([]);
  });

  it('every policy rule reports a Dockerfile that breaks it', () => {
    const bad = 'FROM node:20-bookworm-slim AS build\nRUN npm install\nFROM node:latest\nCOPY missing-dir ./x\nUSER root\n';
    for (const [rule, check] of Object.entries(POLICY)) expect(check(bad), rule).not.toEqual([]);
    expect(validate('FROM node\nCOPY\n').map((d) => d.message)).toContain('COPY requires at least two arguments');
  });

  it('exposes the default ports and runs serve', () => {
    expect(DOCKERFILE).toMatch(new RegExp(`^EXPOSE ${SERVE_OPTIONS['grpc-port'].default} ${SERVE_OPTIONS['http-port'].default}$`, 'm'));
    expect(DOCKERFILE).toMatch(/^ENTRYPOINT \["node", "dist\/cli\.js"\]\nCMD \["serve"\]$/m);
  });

  it('/bin/ratelimit, the command Envoy Gateway gives its rate-limit container, starts tollgate serve', () => {
    const line = DOCKERFILE.match(/^RUN printf '(.+)' > \/bin\/ratelimit && chmod 755 \/bin\/ratelimit$/m);
    expect(line).not.toBeNull();
    // The same script, with the image's /app as this checkout (built by pretest), asked for its help.
    const script = line![1]!.replace(/\\n/g, '\n').replace('/app/', `${process.cwd()}/`);
    const path = join(mkdtempSync(join(tmpdir(), 'tollgate-shim-')), 'ratelimit');
    writeFileSync(path, script, { mode: 0o755 });
    expect(execFileSync(path, ['--help']).toString()).toMatch(/^Usage: tollgate serve/);
  });

  it('package.json engines names the supported LTS lines', () => {
    const { engines } = JSON.parse(readFileSync('package.json', 'utf8')) as { engines: { node: string } };
    expect(engines.node.match(/\^(\d+)\./g)?.map((v) => Number(v.slice(1, -1)))).toEqual(SUPPORTED_NODE_LINES);
  });
});

// Root can remount in a mount namespace of its own (unshare, util-linux); elsewhere this test cannot be set up.
const canUnshare = process.getuid?.() === 0 && spawnSync('unshare', ['--mount', 'true']).status === 0;

describe.runIf(canUnshare)('serve with a read-only root filesystem', () => {
  it('starts, becomes ready and answers while nothing it can reach is writable', async () => {
    const [grpc, http] = [await freePort(), await freePort()];
    // Every mount that holds the checkout or the root, read-only in this process's namespace only.
    const script = [
      'set -e',
      'mount -o remount,bind,ro /',
      'mp=$(findmnt -n -o TARGET -T .); [ "$mp" = / ] || mount -o remount,bind,ro "$mp"',
      'if touch .rw-probe 2>/dev/null; then echo WRITABLE; exit 3; fi',
      `exec "${process.execPath}" dist/cli.js serve --store memory --grpc-port ${grpc} --http-port ${http} --admin-port 0`,
    ].join('\n');
    const child = spawn('unshare', ['--mount', '--propagation', 'private', 'sh', '-c', script], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d));
    child.stderr.on('data', (d: Buffer) => (out += d));
    try {
      await within(15_000, async () => (await fetch(`http://127.0.0.1:${http}/readyz`).catch(() => undefined))?.status === 200, 'ready');
      const metrics = await (await fetch(`http://127.0.0.1:${http}/metrics`)).text();
      expect(metrics).toContain('tollgate_build_info');
      expect(out).not.toMatch(/EROFS|WRITABLE/);
    } finally {
      child.kill('SIGTERM');
    }
    expect(existsSync('.rw-probe')).toBe(false);
  });
});
