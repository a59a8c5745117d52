import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { makeCertificates } from './tls.js';

const run = promisify(execFile);

/** A redis-server process of the test's own, on a free port; never the machine's shared 6379. */
export interface RedisServer {
  port: number;
  url: string;
  process: ChildProcess;
  /** Sends a signal (SIGKILL to crash it, SIGSTOP/SIGCONT to freeze and thaw it). */
  signal(sig: NodeJS.Signals): void;
  /** Starts it again on the same port after a kill. */
  restart(): Promise<void>;
  stop(): Promise<void>;
  cli(...args: string[]): Promise<string>;
}

function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

/** A port whose cluster-bus twin (port + 10000) is free too, below the ephemeral range. */
async function redisPort(): Promise<number> {
  for (let i = 0; i < 200; i++) {
    const port = 20_000 + Math.floor(Math.random() * 10_000);
    if ((await portFree(port)) && (await portFree(port + 10_000))) return port;
  }
  throw new Error('no free port for redis-server');
}

function ping(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = createConnection({ port, host: '127.0.0.1' });
    sock.setTimeout(200);
    sock.once('connect', () => sock.write('PING\r\n'));
    sock.once('data', (d) => {
      resolve(d.toString().startsWith('+PONG'));
      sock.destroy();
    });
    sock.once('error', () => resolve(false));
    sock.once('timeout', () => {
      resolve(false);
      sock.destroy();
    });
  });
}

async function waitFor(check: () => Promise<boolean>, what: string, ms = 10_000): Promise<void> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`timed out waiting for ${what}`);
}

export async function startRedis(extra: string[] = []): Promise<RedisServer> {
  const port = await redisPort();
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-redis-'));
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, ...extra];
  let proc: ChildProcess;
  const launch = async (): Promise<void> => {
    proc = spawn('redis-server', args, { stdio: 'ignore' });
    try {
      await waitFor(() => ping(port), `redis-server on ${port}`);
    } catch (err) {
      proc.kill('SIGKILL'); // never leave a server behind that the test could not use
      throw err;
    }
  };
  await launch();
  const server: RedisServer = {
    port,
    url: `redis://127.0.0.1:${port}`,
    get process() {
      return proc;
    },
    signal: (sig) => proc.kill(sig),
    restart: launch,
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) {
        proc.kill('SIGCONT');
        const exited = new Promise((r) => proc.once('exit', r));
        proc.kill('SIGKILL');
        await exited;
      }
      rmSync(dir, { recursive: true, force: true });
    },
    cli: async (...cmd) => (await run('redis-cli', ['-p', String(port), ...cmd])).stdout.trim(),
  };
  return server;
}

export interface RedisCluster {
  nodes: RedisServer[];
  /** All seed nodes, for --redis-type cluster. */
  url: string;
  stop(): Promise<void>;
}

/** Three masters, slots spread by redis-cli --cluster create; with `replicas: 1`, a replica each, so a master
 * killed fails over (`nodeTimeoutMs`: how long the others wait before they call it failed). */
export async function startRedisCluster(opts: { replicas?: number; nodeTimeoutMs?: number } = {}): Promise<RedisCluster> {
  const replicas = opts.replicas ?? 0;
  const timeout = String(opts.nodeTimeoutMs ?? 2000);
  // One after another: two at once could pick the same free port.
  const nodes: RedisServer[] = [];
  try {
    // No diskless-sync delay: a replica syncs at once (Redis waits 5 s by default), and one not yet synced
    // would never be promoted.
    const args = ['--cluster-enabled', 'yes', '--cluster-node-timeout', timeout, '--repl-diskless-sync-delay', '0'];
    for (let i = 0; i < 3 * (1 + replicas); i++) nodes.push(await startRedis(args));
    const create = ['--cluster', 'create', ...nodes.map((n) => `127.0.0.1:${n.port}`), '--cluster-replicas', String(replicas), '--cluster-yes'];
    await run('redis-cli', create);
    const settled = async (n: RedisServer): Promise<boolean> => {
      const info = await n.cli('cluster', 'info');
      if (!info.includes('cluster_state:ok') || !info.includes(`cluster_known_nodes:${nodes.length}`)) return false;
      const role = await n.cli('info', 'replication');
      return role.includes('role:master') || role.includes('master_link_status:up');
    };
    for (const n of nodes) await waitFor(() => settled(n), `cluster state ok on ${n.port}`, 30_000);
  } catch (err) {
    await Promise.all(nodes.map((n) => n.stop())); // never leave servers behind that the test could not use
    throw err;
  }
  return {
    nodes,
    url: `redis://${nodes.map((n) => `127.0.0.1:${n.port}`).join(',')}`,
    stop: async () => {
      await Promise.all(nodes.map((n) => n.stop()));
    },
  };
}

export interface Sentinel {
  port: number;
  stop(): Promise<void>;
}

/** One sentinel (quorum 1) watching `masterPort` under the name `mymaster`. */
export async function startSentinel(masterPort: number): Promise<Sentinel> {
  const port = await redisPort();
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-sentinel-'));
  const conf = join(dir, 'sentinel.conf');
  writeFileSync(conf, `port ${port}\nbind 127.0.0.1\nsentinel monitor mymaster 127.0.0.1 ${masterPort} 1\n`);
  const proc = spawn('redis-server', [conf, '--sentinel'], { stdio: 'ignore' });
  await waitFor(() => ping(port), `sentinel on ${port}`);
  return {
    port,
    stop: async () => {
      const exited = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGKILL');
      await exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export interface TlsRedis {
  port: number;
  /** The CA that signed the server's certificate and `client.pem`/`client.key`, in `certs`. */
  certs: ReturnType<typeof makeCertificates>;
  /** redis-cli over TLS, with the client certificate. */
  cli(...args: string[]): Promise<string>;
  stop(): Promise<void>;
}

/** A TLS-only redis-server on a free port: its certificate for `san` from a private CA, and with `authClients`
 * (--tls-auth-clients yes) a client certificate from that CA required, as a Redis for mutual TLS asks. */
export async function startTlsRedis(opts: { san: string; authClients: boolean; password?: string }): Promise<TlsRedis> {
  const certs = makeCertificates([
    { name: 'server', san: opts.san },
    { name: 'client', san: 'DNS:tollgate' },
  ]);
  const port = await redisPort();
  const auth = opts.password ? ['--requirepass', opts.password] : [];
  const proc = spawn(
    'redis-server',
    [
      ...['--port', '0', '--tls-port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', certs.dir],
      ...['--tls-cert-file', certs.file('server.pem'), '--tls-key-file', certs.file('server.key'), '--tls-ca-cert-file', certs.file('ca.pem')],
      ...['--tls-auth-clients', opts.authClients ? 'yes' : 'no', ...auth],
    ],
    { stdio: 'ignore' },
  );
  const tlsArgs = ['--tls', '--cacert', certs.file('ca.pem'), '--cert', certs.file('client.pem'), '--key', certs.file('client.key')];
  // The certificate names a host, not 127.0.0.1: redis-cli is told the name to check (--sni).
  const cli = async (...args: string[]): Promise<string> =>
    (
      await run('redis-cli', [
        ...tlsArgs,
        '--sni',
        'redis.internal',
        '-p',
        String(port),
        ...(opts.password ? ['-a', opts.password, '--no-auth-warning'] : []),
        ...args,
      ])
    ).stdout.trim();
  try {
    await waitFor(
      () =>
        cli('PING').then(
          (r) => r === 'PONG',
          () => false,
        ),
      `TLS redis-server on ${port}`,
    );
  } catch (err) {
    proc.kill('SIGKILL');
    throw err;
  }
  return {
    port,
    certs,
    cli,
    stop: async () => {
      const exited = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGKILL');
      await exited;
      rmSync(certs.dir, { recursive: true, force: true });
    },
  };
}
