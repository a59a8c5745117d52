import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { fingerprint } from '../../src/fingerprint.js';
import { scrape } from '../helpers/metrics.js';
import { CLI, type Daemon, freePort, type Run, runCli, startCli } from '../helpers/process.js';

// The paths off the happy path, as a user meets them: the real binary, one line on stderr, no stack.

/** A failed run as the CLI promises it: this exit code, one line on stderr, no stack frame. */
function expectOneLine(run: Run, code: number, pattern: RegExp): void {
  expect(run.code).toBe(code);
  expect(run.stderr.endsWith('\n') && run.stderr.split('\n').length === 2, `not one line: ${JSON.stringify(run.stderr)}`).toBe(true);
  expect(run.stderr).not.toMatch(/\n\s+at /);
  expect(run.stderr).not.toMatch(/^\s+at /m);
  expect(run.stderr).toMatch(pattern);
}

function tmp(): string {
  return mkdtempSync(join(tmpdir(), 'tollgate-cli-'));
}

/** Runs the CLI with `input` on stdin (not a terminal). */
function runWithStdin(args: string[], input: string): Promise<Run> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [CLI, ...args], { timeout: 15_000 });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d));
    child.stderr.on('data', (d: Buffer) => (stderr += d));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
    child.stdin.end(input);
  });
}

describe('serve: a port that cannot be had', () => {
  let holder: Server | undefined;
  afterEach(() => holder?.close());
  const hold = async (): Promise<number> => {
    const port = await freePort();
    holder = createServer();
    await new Promise<void>((r) => holder!.listen(port, '127.0.0.1', r));
    return port;
  };

  it('gRPC port in use: names the address, the flag and the variable; grpc-js says nothing of its own', async () => {
    const port = await hold();
    const run = await runCli(['serve', '--grpc-host', '127.0.0.1', '--grpc-port', String(port), '--http-port', '0', '--log-level', 'silent']);
    expectOneLine(
      run,
      1,
      new RegExp(`^tollgate: cannot listen for gRPC on 127\\.0\\.0\\.1:${port}: the port is already in use \\(set --grpc-port or GRPC_PORT`),
    );
    expect(run.stderr).not.toContain('No address added');
  });

  it('HTTP port in use, set by PORT', async () => {
    const port = await hold();
    const run = await runCli(['serve', '--grpc-port', '0', '--log-level', 'silent'], { PORT: String(port), HOST: '127.0.0.1' });
    expectOneLine(run, 1, new RegExp(`^tollgate: cannot listen for HTTP on 127\\.0\\.0\\.1:${port}: the port is already in use \\(set --http-port or PORT`));
  });
});

describe('serve: bad settings name where the value came from', () => {
  it.each([
    [['--log-level', 'loud'], {}, /^tollgate: --log-level must be one of trace, debug, info, warn, error, fatal, silent \(got "loud"\)/],
    [[], { LOG_LEVEL: 'loud' }, /^tollgate: LOG_LEVEL must be one of trace, debug, info, warn, error, fatal, silent \(got "loud"\)/],
    [[], { GRPC_PORT: 'abc' }, /^tollgate: GRPC_PORT must be a port number 0-65535 \(got "abc"\)/],
    [['--grpc-port', 'abc'], { GRPC_PORT: '1' }, /^tollgate: --grpc-port must be a port number/],
    [[], { SHADOW_MODE: 'maybe' }, /^tollgate: SHADOW_MODE must be true or false/],
    [[], { BACKEND_TYPE: 'memcache' }, /^tollgate: BACKEND_TYPE must be memory or redis \(got "memcache"\): Tollgate has no memcache store/],
    [[], { BACKEND_TYPE: 'redis', REDIS_SOCKET_TYPE: 'unix', REDIS_URL: '/var/run/redis.sock' }, /^tollgate: REDIS_SOCKET_TYPE must be tcp/],
  ])('%j %j', async (args, env, pattern) => {
    expectOneLine(await runCli(['serve', ...args], env), 2, pattern);
  });
});

describe('simulate: files that are not there or not files', () => {
  it('--traffic missing, a directory; --envoy missing; --tiers missing', async () => {
    expectOneLine(
      await runCli(['simulate', '--traffic', '/nope.jsonl']),
      1,
      /^tollgate: cannot read the traffic log \/nope\.jsonl: no such file or directory$/m,
    );
    expectOneLine(await runCli(['simulate', '--traffic', tmp()]), 1, /^tollgate: cannot read the traffic log .*: it is a directory$/m);
    const log = join(tmp(), 't.jsonl');
    writeFileSync(log, '');
    expectOneLine(
      await runCli(['simulate', '--traffic', log, '--envoy', '/missing.yaml']),
      1,
      /^tollgate: cannot read the Envoy config \(--envoy\) \/missing\.yaml: no such file or directory$/m,
    );
    expectOneLine(
      await runCli(['simulate', '--traffic', log, '--tiers', '/missing.json']),
      1,
      /^tollgate: cannot read tier assignments \(--tiers\) \/missing\.json/,
    );
  });

  it('--generate --out into a directory that does not exist', async () => {
    expectOneLine(
      await runCli(['simulate', '--generate', '10', '--out', '/no/such/dir/x.jsonl']),
      1,
      /^tollgate: cannot write \/no\/such\/dir\/x\.jsonl: no such file or directory$/m,
    );
  });

  it('--generate into a reader that goes away (| head -2) exits quietly', async () => {
    const child = spawn('sh', ['-c', `"${process.execPath}" ${CLI} simulate --generate 200000 | head -2`], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d));
    child.stderr.on('data', (d: Buffer) => (err += d));
    await new Promise((r) => child.on('close', r));
    expect(out.split('\n').filter((l) => l.startsWith('{'))).toHaveLength(2);
    expect(err).toBe('');
  });
});

describe('tiers and inspect', () => {
  it('an unknown subcommand is named as unknown', async () => {
    expectOneLine(await runCli(['tiers', 'frob']), 2, /^tollgate: unknown tiers subcommand "frob": use assign, remove or list/);
    // tiers takes the flags it lists (docs/cli.md): inspect's --reset is refused, not ignored.
    expectOneLine(await runCli(['tiers', 'list', '--reset']), 2, /^tollgate: '--reset' is inspect's option, not tiers'/);
  });

  it.each([31, 33, 40, 63])('a %i-character hex string is refused as a mistyped fingerprint, before any call', async (length) => {
    const text = 'a1b2c3d4'.repeat(8).slice(0, length);
    const env = { TOLLGATE_ADMIN_TOKEN: 'admin', TOLLGATE_URL: 'http://127.0.0.1:9' };
    expectOneLine(
      await runCli(['tiers', 'assign', text, 'gold'], env),
      2,
      new RegExp(`^tollgate: a ${length}-character hex string is not a fingerprint .* pass --token if it is a token`),
    );
    expectOneLine(await runCli(['inspect', text], env), 2, /is not a fingerprint/);
    expect((await runCli(['inspect', text], env)).stderr).not.toContain(text);
  });

  it('an admin API that is not there is named with the cause and how to reach it, not "fetch failed"', async () => {
    const url = `http://127.0.0.1:${await freePort()}`;
    const run = await runCli(['tiers', 'list', '--url', url], { TOLLGATE_ADMIN_TOKEN: 'admin' });
    expectOneLine(run, 1, new RegExp(`^tollgate: cannot reach the admin API at ${url} \\(ECONNREFUSED\\): .*kubectl port-forward`));
  });

  describe('against a running service', () => {
    let daemon: Daemon | undefined;
    afterEach(() => daemon?.child.kill('SIGKILL'));

    it('--token says a hex string is a token: assigned by its fingerprint', async () => {
      const [grpc, http, adminPort] = [await freePort(), await freePort(), await freePort()];
      const env = { TOLLGATE_ADMIN_TOKEN: 'admin-secret', LOG_LEVEL: 'info' };
      daemon = await startCli(['serve', '--grpc-port', String(grpc), '--http-port', String(http), '--admin-port', String(adminPort)], /tollgate serving/, env);
      const hex = 'abcdef0123456789'.repeat(3).slice(0, 40);
      const url = `http://127.0.0.1:${adminPort}`;
      const run = await runCli(['tiers', 'assign', '--token', hex, 'multi-property-group', '--url', url], env);
      expect(run.code).toBe(0);
      expect(run.stdout).toContain(`${fingerprint(hex)} → multi-property-group`);
    });
  });
});

describe('explain --url: a service to ask', () => {
  it('not an address, nothing there, not Tollgate, or beside --config: one line each', async () => {
    const args = ['api', 'k=v'];
    expectOneLine(
      await runCli(['explain', '--url', 'nowhere', ...args]),
      2,
      /^tollgate: --url must be the service's HTTP address, such as http:\/\/127\.0\.0\.1:8080 \(got "nowhere"\)\n$/,
    );
    const port = await freePort();
    expectOneLine(
      await runCli(['explain', '--url', `http://127.0.0.1:${port}`, ...args]),
      1,
      new RegExp(`^tollgate: cannot reach the service at http://127\\.0\\.0\\.1:${port}: ECONNREFUSED\n$`),
    );
    const other = createServer((socket) => socket.end('HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello'));
    const otherPort = await new Promise<number>((resolve) => other.listen(0, '127.0.0.1', () => resolve((other.address() as { port: number }).port)));
    try {
      expectOneLine(
        await runCli(['explain', '--url', `http://127.0.0.1:${otherPort}`, ...args]),
        1,
        /answered 200 with something other than JSON: is it Tollgate's HTTP port\?\n$/,
      );
    } finally {
      other.close();
    }
    expectOneLine(
      await runCli(['explain', '--url', 'http://127.0.0.1:1', '--config', 'config', ...args]),
      2,
      /^tollgate: --url asks the running service, which has its own config/,
    );
  });

  it('under CONFIG_TYPE=GRPC_XDS_SOTW without --url or --config: one line saying how to ask the service', async () => {
    const r = await runCli(['explain', 'api', 'k=v'], { CONFIG_TYPE: 'GRPC_XDS_SOTW', PORT: '9180' });
    expectOneLine(r, 2, /^tollgate: the config comes from the xDS server here \(CONFIG_TYPE=GRPC_XDS_SOTW\), not a directory: ask the running service, /);
    expect(r.stderr).toContain('tollgate explain --url http://127.0.0.1:9180 DOMAIN key=value');
    // With --config it reads the directory asked for, as before.
    expect((await runCli(['explain', '--config', 'config', 'property-api', 'category=read'], { CONFIG_TYPE: 'GRPC_XDS_SOTW' })).code).toBe(0);
  });
});

describe('fingerprint from stdin, out of argv and shell history', () => {
  it.each([[['-']], [[]]])('fingerprint %j reads the token from stdin', async (args) => {
    const run = await runWithStdin(['fingerprint', ...args], 'Bearer from-stdin\n');
    expect(run.code).toBe(0);
    expect(run.stdout).toBe(`${fingerprint('from-stdin')}\n`);
  });

  it('an empty stdin is one line', async () => {
    expectOneLine(await runWithStdin(['fingerprint', '-'], ''), 2, /^tollgate: no token on stdin/);
  });
});

describe('the version', () => {
  let daemon: Daemon | undefined;
  afterEach(() => daemon?.child.kill('SIGKILL'));

  it('--version, the serving line and tollgate_build_info', async () => {
    const { version } = JSON.parse(readFileSync('package.json', 'utf8')) as { version: string };
    const run = await runCli(['--version']);
    expect(run).toEqual({ code: 0, stdout: `tollgate ${version}\n`, stderr: '' });
    const http = await freePort();
    daemon = await startCli(['serve', '--grpc-port', '0', '--http-port', String(http)], /tollgate serving/, { LOG_LEVEL: 'info' });
    expect(daemon.output()).toContain(`"version":"${version}"`);
    const { series } = await scrape(http);
    expect(series.get(`tollgate_build_info{version="${version}",node="${process.version}"}`)).toBe(1);
  });
});

describe('check-config: paths', () => {
  it('a path that does not exist is one line', async () => {
    expectOneLine(await runCli(['check-config', '/nonexistent']), 1, /^tollgate: \/nonexistent: no such file or directory$/m);
  });

  it('a single file is checked as a directory holding only it', async () => {
    const run = await runCli(['check-config', 'config/property-api.yaml']);
    expect(run.code).toBe(0);
    expect(run.stdout).toContain('category_read.token  10/second + 1000/hour');
  });

  it('a YAML syntax error is one problem without the parser\'s dangling "at line…:"', async () => {
    const dir = tmp();
    mkdirSync(join(dir, 'c'));
    writeFileSync(join(dir, 'c', 'bad.yaml'), 'domain: x\ndescriptors:\n  - key: a\n    value: [\n');
    const run = await runCli(['check-config', join(dir, 'c')]);
    expect(run.code).toBe(1);
    const [first] = run.stderr.split('\n');
    expect(first).toMatch(/bad\.yaml:5:1: .*\S$/);
    expect(first).not.toMatch(/at line \d+, column \d+/);
    expect(first).not.toMatch(/:$/);
  });
});
