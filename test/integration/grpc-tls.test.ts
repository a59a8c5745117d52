import { copyFileSync, readFileSync, writeFileSync } from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ListenError } from '../../src/errors.js';
import { HealthService } from '../../src/server/health.js';
import { KeptCertificates } from '../../src/server/kept-certificates.js';
import { clientConstructor, HEALTH_SERVICE, RLQS_SERVICE, serviceDefinition } from '../../src/server/proto.js';
import { grpcServerCredentials } from '../../src/server/tls.js';
import { parseServeArgs, SettingsError } from '../../src/settings/settings.js';
import { RlsClient, type RlsRequest, startTestService, type TestService } from '../helpers/service.js';
import { within } from '../helpers/time.js';
import { makeCertificates } from '../helpers/tls.js';

// GRPC_SERVER_USE_TLS, as envoyproxy/ratelimit reads it and Envoy Gateway sets it: TLS on the gRPC port, and
// with GRPC_CLIENT_TLS_CACERT a client certificate required.

const req: RlsRequest = { domain: 'property-api', descriptors: [{ entries: [{ key: 'category', value: 'read' }] }] };
let certs: ReturnType<typeof makeCertificates>;
let t: TestService | undefined;
const clients: RlsClient[] = [];

beforeAll(() => {
  certs = makeCertificates([
    { name: 'server', san: 'IP:127.0.0.1' },
    { name: 'client', san: 'DNS:envoy' },
  ]);
}, 30_000);
afterEach(async () => {
  for (const c of clients.splice(0)) c.close();
  await t?.close();
  t = undefined;
});

const tlsClient = (port: number, withCert: boolean): RlsClient => {
  const f = (n: string): Buffer => readFileSync(certs.file(n));
  const creds = withCert ? grpc.credentials.createSsl(f('ca.pem'), f('client.key'), f('client.pem')) : grpc.credentials.createSsl(f('ca.pem'));
  const c = new RlsClient(port, {}, creds);
  clients.push(c);
  return c;
};
const plainClient = (port: number): RlsClient => {
  const c = new RlsClient(port);
  clients.push(c);
  return c;
};
/** grpc.health.v1.Health/Check over TLS, with or without a client certificate: a new connection each time. */
function healthCheck(port: number, withCert: boolean, caFile = certs.file('ca.pem'), client = certs): Promise<number> {
  const f = (n: string): Buffer => readFileSync(client.file(n));
  const creds = withCert
    ? grpc.credentials.createSsl(readFileSync(caFile), f('client.key'), f('client.pem'))
    : grpc.credentials.createSsl(readFileSync(caFile));
  const Ctor = clientConstructor(HEALTH_SERVICE);
  const c = new Ctor(`127.0.0.1:${port}`, creds, { 'grpc.use_local_subchannel_pool': 1 }) as unknown as grpc.Client & {
    Check(req: object, opts: object, cb: (err: grpc.ServiceError | null, r: { status: number }) => void): void;
  };
  return new Promise<number>((resolve, reject) =>
    c.Check({ service: '' }, { deadline: Date.now() + 3000 }, (err, r) => (err ? reject(err) : resolve(r.status))),
  ).finally(() => c.close());
}

/** Whether an RLQS stream gets as far as the service: it ends with the transport's error when it does not. */
function rlqsOpens(port: number, withCert: boolean): Promise<void> {
  const f = (n: string): Buffer => readFileSync(certs.file(n));
  const creds = withCert ? grpc.credentials.createSsl(f('ca.pem'), f('client.key'), f('client.pem')) : grpc.credentials.createSsl(f('ca.pem'));
  const Ctor = clientConstructor(RLQS_SERVICE);
  const c = new Ctor(`127.0.0.1:${port}`, creds) as unknown as grpc.Client & { StreamRateLimitQuotas(opts: object): grpc.ClientDuplexStream<object, object> };
  return new Promise<void>((resolve, reject) => {
    const stream = c.StreamRateLimitQuotas({ deadline: Date.now() + 3000 });
    stream.on('error', reject);
    stream.on('data', () => resolve());
    stream.on('end', () => resolve());
    stream.write({ domain: 'property-api', bucket_quota_usages: [] });
  }).finally(() => c.close());
}

const env = (mutual: boolean): NodeJS.ProcessEnv => ({
  GRPC_SERVER_USE_TLS: 'true',
  GRPC_SERVER_TLS_CERT: certs.file('server.pem'),
  GRPC_SERVER_TLS_KEY: certs.file('server.key'),
  ...(mutual ? { GRPC_CLIENT_TLS_CACERT: certs.file('ca.pem') } : {}),
});

describe('TLS on the gRPC port (GRPC_SERVER_USE_TLS)', () => {
  it('TLS: a client trusting the CA decides; a plaintext client gets nothing', async () => {
    t = await startTestService({ env: env(false) });
    expect((await tlsClient(t.service.grpcPort, false).call(req)).overall_code).toBe('OK');
    await expect(plainClient(t.service.grpcPort).call(req, 2000)).rejects.toMatchObject({ code: expect.any(Number) });
  });

  it('mTLS (GRPC_CLIENT_TLS_CACERT): a client certificate is required', async () => {
    t = await startTestService({ env: env(true) });
    expect((await tlsClient(t.service.grpcPort, true).call(req)).overall_code).toBe('OK');
    await expect(tlsClient(t.service.grpcPort, false).call(req, 2000)).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
  });

  it("GRPC_SERVER_TLS_CA_CERT, Envoy Gateway's name for it: without a certificate no client is served, health and RLQS included", async () => {
    const { GRPC_CLIENT_TLS_CACERT: ca, ...rest } = env(true);
    t = await startTestService({ env: { ...rest, GRPC_SERVER_TLS_CA_CERT: ca } });
    const port = t.service.grpcPort;
    expect((await tlsClient(port, true).call(req)).overall_code).toBe('OK');
    await expect(tlsClient(port, false).call(req, 2000)).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
    await expect(healthCheck(port, false)).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
    expect(await healthCheck(port, true)).toBe(1); // SERVING
    await expect(rlqsOpens(port, false)).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
  });

  it("GRPC_PLAINTEXT_PORT: AI Gateway's plaintext quota cluster on a second port; the TLS port stays mTLS only", async () => {
    t = await startTestService({ env: { ...env(true), GRPC_PLAINTEXT_PORT: '0' } });
    const plain = t.service.grpcPlaintextPort!;
    expect(plain).toBeGreaterThan(0);
    expect(plain).not.toBe(t.service.grpcPort);
    // One server behind both: a counter charged on one port is the counter seen on the other.
    const first = await plainClient(plain).call(req);
    const second = await tlsClient(t.service.grpcPort, true).call(req);
    expect(first.overall_code).toBe('OK');
    expect(second.statuses[0]!.limit_remaining).toBe(first.statuses[0]!.limit_remaining - 1);
    await expect(tlsClient(t.service.grpcPort, false).call(req, 2000)).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
    expect(() => parseServeArgs([], { GRPC_PLAINTEXT_PORT: '8082' })).toThrow(/without --grpc-tls the gRPC port is plaintext already/);
    expect(() => parseServeArgs([], { ...env(true), GRPC_PLAINTEXT_PORT: '8081' })).toThrow(/GRPC_PLAINTEXT_PORT must differ from --grpc-port \(both 8081\)/);
  });

  it('files that are not certificates stop the start with a ListenError (the CLI prints it as one line)', async () => {
    const e = { ...env(false), GRPC_SERVER_TLS_CERT: certs.file('server.cnf') };
    await expect(startTestService({ env: e })).rejects.toThrow(ListenError);
    await expect(startTestService({ env: e })).rejects.toThrow(
      /^cannot serve gRPC over TLS: GRPC_SERVER_TLS_CERT, GRPC_SERVER_TLS_KEY cannot be used as TLS certificates \(/,
    );
    // A key that is not the certificate's.
    await expect(startTestService({ env: { ...env(true), GRPC_SERVER_TLS_KEY: certs.file('client.key') } })).rejects.toThrow(
      /and GRPC_CLIENT_TLS_CACERT cannot be used/,
    );
  });

  it('the client CA is re-read with the certificate: a CA swapped into the file admits its clients, and only them', async () => {
    const other = makeCertificates([{ name: 'client', san: 'DNS:envoy' }]);
    const dir = makeCertificates([{ name: 'server', san: 'IP:127.0.0.1' }]);
    copyFileSync(certs.file('ca.pem'), dir.file('client-ca.pem'));
    const files = { cert: dir.file('server.pem'), key: dir.file('server.key'), clientCa: dir.file('client-ca.pem'), clientCaFrom: 'GRPC_SERVER_TLS_CA_CERT' };
    const server = new grpc.Server();
    const health = new HealthService([]);
    health.set(true);
    server.addService(serviceDefinition(HEALTH_SERVICE), health.handlers());
    const { credentials } = await grpcServerCredentials(files, 100);
    const port = await new Promise<number>((resolve, reject) => server.bindAsync('127.0.0.1:0', credentials, (err, p) => (err ? reject(err) : resolve(p))));
    const check = (c: ReturnType<typeof makeCertificates>): Promise<number> => healthCheck(port, true, dir.file('ca.pem'), c);
    try {
      expect(await check(certs)).toBe(1);
      await expect(check(other)).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
      copyFileSync(other.file('ca.pem'), dir.file('client-ca.pem'));
      await within(
        5000,
        () =>
          check(other).then(
            () => true,
            () => false,
          ),
        "the new CA's client admitted",
      );
      await expect(check(certs)).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
    } finally {
      server.forceShutdown();
    }
  });

  it('files replaced by ones that cannot be used keep the last good in force, said once a change; an expired one is a problem', async () => {
    const dir = makeCertificates([{ name: 'server', san: 'IP:127.0.0.1' }]);
    copyFileSync(certs.file('ca.pem'), dir.file('client-ca.pem'));
    const files = { cert: dir.file('server.pem'), key: dir.file('server.key'), clientCa: dir.file('client-ca.pem'), clientCaFrom: 'GRPC_CLIENT_TLS_CACERT' };
    const said: string[] = [];
    const server = new grpc.Server();
    const health = new HealthService([]);
    health.set(true);
    server.addService(serviceDefinition(HEALTH_SERVICE), health.handlers());
    const port = await grpcServerCredentials(files, 50, { onUnusable: (what, code) => said.push(`${what}: ${code}`) });
    const bound = await new Promise<number>((resolve, reject) =>
      server.bindAsync('127.0.0.1:0', port.credentials, (err, p) => (err ? reject(err) : resolve(p))),
    );
    try {
      expect(await healthCheck(bound, true, dir.file('ca.pem'))).toBe(1);
      // Round 5: a CA file that is not PEM refused every new client with a valid certificate, silently.
      writeFileSync(dir.file('client-ca.pem'), '-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n');
      await within(5000, () => said.length === 1, 'the unusable CA said');
      expect(said[0]).toMatch(/^certificate, key and client CA: /);
      expect(await healthCheck(bound, true, dir.file('ca.pem'))).toBe(1); // a new client, on the last good CA
      await new Promise((r) => setTimeout(r, 300)); // six re-reads of the same bad file: said once
      expect(said).toHaveLength(1);
      writeFileSync(dir.file('client-ca.pem'), 'another change, no more usable');
      await within(5000, () => said.length === 2, 'the next change said');
      expect(port.problem()).toBeUndefined();
      // The certificate in force, read a century on: expired, so the port can take no new client.
      const kept = new KeptCertificates({ cert: files.cert, key: files.key, clientCa: undefined }, { onUnusable: () => undefined }, 60_000);
      expect(await kept.start()).toBeUndefined();
      expect(kept.problem(Date.now() + 100 * 365 * 86_400_000)).toMatch(/has expired/);
      kept.stop();
    } finally {
      server.forceShutdown();
    }
  });

  it('a missing or unreadable file stops the start, naming its variable', () => {
    const refused = (e: NodeJS.ProcessEnv): string => {
      try {
        parseServeArgs([], e);
        return 'accepted';
      } catch (err) {
        expect(err).toBeInstanceOf(SettingsError);
        return (err as Error).message;
      }
    };
    expect(refused({ GRPC_SERVER_USE_TLS: 'true' })).toBe('GRPC_SERVER_USE_TLS needs --grpc-tls-cert');
    expect(refused({ ...env(true), GRPC_SERVER_TLS_KEY: '/nonexistent/key.pem' })).toBe('GRPC_SERVER_TLS_KEY: cannot read the file (ENOENT)');
    expect(refused({ ...env(true), GRPC_CLIENT_TLS_CACERT: '/nonexistent/ca.pem' })).toBe('GRPC_CLIENT_TLS_CACERT: cannot read the file (ENOENT)');
  });
});
