import { readFileSync } from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ListenError } from '../../src/errors.js';
import { parseServeArgs, SettingsError } from '../../src/settings.js';
import { RlsClient, type RlsRequest, startTestService, type TestService } from '../helpers/service.js';
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
