import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { parseServeArgs } from '../../src/settings/settings.js';
import { jsonOf } from '../helpers/json.js';
import { freePort, startCli } from '../helpers/process.js';
import { startTlsRedis, type TlsRedis } from '../helpers/redis.js';
import { property, RlsClient, startTestService, type TestService } from '../helpers/service.js';
import { within } from '../helpers/time.js';
import { makeCertificates } from '../helpers/tls.js';

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
      const ready = await jsonOf(await fetch(`http://127.0.0.1:${httpPort}/readyz`));
      expect(ready.reason).toMatch(/store degraded/);
    } finally {
      rls.close();
      daemon.child.kill('SIGTERM');
      await daemon.exited;
    }
    expect(daemon.output()).not.toContain(PASSWORD);
  });
});

// Mutual TLS, as Envoy Gateway's Redis TLS variant asks for it (REDIS_TLS, REDIS_TLS_CLIENT_CERT, _KEY) and as
// envoyproxy/ratelimit reads it (src/settings/settings.go, RedisTlsConfig; src/utils/tls.go): a Redis that
// requires a client certificate, whose own certificate names a host (redis.internal) and not the address.
describe('Redis over mutual TLS (REDIS_TLS_CLIENT_CERT, REDIS_TLS_CLIENT_KEY, REDIS_TLS_CACERT)', () => {
  let mtls: TlsRedis;
  let t: TestService | undefined;
  beforeAll(async () => {
    mtls = await startTlsRedis({ san: 'DNS:redis.internal', authClients: true });
  }, 30_000);
  afterAll(() => mtls?.stop());
  afterEach(async () => {
    await t?.close();
    t = undefined;
  });

  const start = (env: NodeJS.ProcessEnv): Promise<TestService> =>
    startTestService({
      args: ['--store', 'redis', '--redis-timeout-ms', '1000', '--redis-failure', 'allow'],
      env: { REDIS_URL: `127.0.0.1:${mtls.port}`, REDIS_TLS: 'true', ...env },
    });
  const files = (): NodeJS.ProcessEnv => ({
    REDIS_TLS_CLIENT_CERT: mtls.certs.file('client.pem'),
    REDIS_TLS_CLIENT_KEY: mtls.certs.file('client.key'),
    REDIS_TLS_CACERT: mtls.certs.file('ca.pem'),
  });
  const counted = async (s: TestService, token: string): Promise<boolean> => {
    await s.rls.call(property('write', token));
    return (await mtls.cli('--scan', '--pattern', 'tollgate:v2:property-api:category_write.token:*')).length > 0;
  };
  const degraded = async (s: TestService): Promise<boolean> => {
    await s.rls.call(property('write', 'Bearer probe')).catch(() => undefined);
    return s.service.store.health().degraded;
  };

  it('with its client certificate and CA, and the name check off (REDIS_TLS_SKIP_HOSTNAME_VERIFICATION): it counts', async () => {
    t = await start({ ...files(), REDIS_TLS_SKIP_HOSTNAME_VERIFICATION: 'true' });
    await within(10_000, () => counted(t!, 'Bearer mtls'), 'a counter in the mutual-TLS Redis');
    expect(t.service.store.health().degraded).toBe(false);
  });

  it('without a client certificate, with a CA that did not sign the server, or a name it does not hold: no connection', async () => {
    const other = makeCertificates([{ name: 'x', san: 'DNS:x' }]);
    for (const env of [
      { REDIS_TLS_CACERT: mtls.certs.file('ca.pem'), REDIS_TLS_SKIP_HOSTNAME_VERIFICATION: 'true' },
      { ...files(), REDIS_TLS_CACERT: other.file('ca.pem'), REDIS_TLS_SKIP_HOSTNAME_VERIFICATION: 'true' },
      files(),
    ]) {
      t = await start(env);
      await within(10_000, () => degraded(t!), 'degraded');
      await t.close();
      t = undefined;
    }
  });

  it('files set without TLS, or a certificate without its key, stop the start naming the variables', () => {
    const refused = (env: NodeJS.ProcessEnv): string => {
      try {
        parseServeArgs(['--store', 'redis'], { REDIS_URL: `127.0.0.1:${mtls.port}`, ...env });
        return 'accepted';
      } catch (err) {
        return (err as Error).message;
      }
    };
    expect(refused(files())).toBe(
      'REDIS_TLS_CLIENT_CERT, REDIS_TLS_CLIENT_KEY, REDIS_TLS_CACERT set, but the connection to Redis is not TLS: ' +
        'set REDIS_TLS=true or a rediss:// URL in REDIS_URL',
    );
    expect(refused({ REDIS_TLS: 'true', REDIS_TLS_CLIENT_CERT: mtls.certs.file('client.pem') })).toBe(
      'REDIS_TLS_CLIENT_CERT and --redis-tls-key go together: set both, or neither',
    );
    expect(refused({ REDIS_TLS: 'true', REDIS_TLS_CACERT: '/nonexistent/ca.pem' })).toBe('REDIS_TLS_CACERT: cannot read the file (ENOENT)');
  });
});
