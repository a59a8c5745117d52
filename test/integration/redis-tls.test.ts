import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort, startCli } from '../helpers/process.js';
import { property, RlsClient } from '../helpers/service.js';
import { within } from '../helpers/time.js';

// rediss:// with a user and password, against a TLS-only redis-server whose certificate comes from a private
// CA; Tollgate trusts it through Node's NODE_EXTRA_CA_CERTS, as an operator would set it.

const PASSWORD = 'tls-test-password';
let dir: string;
let port: number;
let redis: ChildProcess;

const cli = (...args: string[]): string =>
  execFileSync('redis-cli', [
    '--tls',
    '--cacert',
    join(dir, 'ca.pem'),
    '-p',
    String(port),
    '--user',
    'default',
    '--pass',
    PASSWORD,
    '--no-auth-warning',
    ...args,
  ])
    .toString()
    .trim();

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'tollgate-tls-'));
  const ssl = (...args: string[]): void => void execFileSync('openssl', args, { cwd: dir, stdio: 'ignore' });
  ssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=tollgate-test-ca');
  ssl('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=127.0.0.1');
  writeFileSync(join(dir, 'ext.cnf'), 'subjectAltName=IP:127.0.0.1\n');
  ssl('x509', '-req', '-in', 'server.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'server.pem', '-days', '2', '-extfile', 'ext.cnf');
  port = await freePort();
  redis = spawn(
    'redis-server',
    [
      '--port',
      '0',
      '--tls-port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--tls-cert-file',
      join(dir, 'server.pem'),
      '--tls-key-file',
      join(dir, 'server.key'),
      '--tls-ca-cert-file',
      join(dir, 'ca.pem'),
      '--tls-auth-clients',
      'no',
      '--requirepass',
      PASSWORD,
      '--save',
      '',
      '--appendonly',
      'no',
      '--dir',
      dir,
    ],
    { stdio: 'ignore' },
  );
  const pong = (): boolean => {
    try {
      return cli('PING') === 'PONG';
    } catch {
      return false; // not up yet
    }
  };
  await within(10_000, pong).catch(() => {
    throw new Error('TLS redis-server did not start');
  });
}, 30_000);

afterAll(() => {
  redis?.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

describe('Redis over TLS with a password', () => {
  it('counts in a rediss:// Redis and never logs the password', async () => {
    const [grpcPort, httpPort] = [await freePort(), await freePort()];
    const daemon = await startCli(
      ['serve', '--grpc-port', String(grpcPort), '--http-port', String(httpPort), '--store', 'redis', '--redis-timeout-ms', '1000'],
      /tollgate serving/,
      { REDIS_URL: `rediss://default:${PASSWORD}@127.0.0.1:${port}`, NODE_EXTRA_CA_CERTS: join(dir, 'ca.pem') },
    );
    const rls = new RlsClient(grpcPort);
    try {
      const res = await rls.call(property('write', 'Bearer over-tls'));
      expect(res.overall_code).toBe('OK');
      expect(cli('--scan', '--pattern', 'tollgate:v2:property-api:category_write.token:*')).toContain(':second:');
      expect((await fetch(`http://127.0.0.1:${httpPort}/readyz`)).status).toBe(200);
      expect(daemon.output()).not.toContain('redis store degraded');
    } finally {
      rls.close();
      daemon.child.kill('SIGTERM');
      await daemon.exited;
    }
    expect(daemon.output()).not.toContain(PASSWORD);
  });

  it('a wrong password leaves the store degraded, says so on /readyz, and still never shows it', async () => {
    const [grpcPort, httpPort] = [await freePort(), await freePort()];
    const daemon = await startCli(
      ['serve', '--grpc-port', String(grpcPort), '--http-port', String(httpPort), '--store', 'redis', '--redis-failure', 'local'],
      /tollgate serving/,
      { REDIS_URL: `rediss://default:wrong-${PASSWORD}@127.0.0.1:${port}`, NODE_EXTRA_CA_CERTS: join(dir, 'ca.pem') },
    );
    const rls = new RlsClient(grpcPort);
    try {
      expect((await rls.call(property('write', 'Bearer wrong-pass'))).overall_code).toBe('OK'); // local policy
      const ready = await (await fetch(`http://127.0.0.1:${httpPort}/readyz`)).json();
      expect(ready.reason).toMatch(/store degraded/);
    } finally {
      rls.close();
      daemon.child.kill('SIGTERM');
      await daemon.exited;
    }
    expect(daemon.output()).not.toContain(PASSWORD);
  });
});
