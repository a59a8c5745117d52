import { readFileSync } from 'node:fs';
import { createSecureContext } from 'node:tls';
import * as grpc from '@grpc/grpc-js';
import { ListenError } from '../errors.js';

/** GRPC_SERVER_USE_TLS: the files of the gRPC port's certificate, and of the CA its clients' certificates must
 * chain to (GRPC_CLIENT_TLS_CACERT, as envoyproxy/ratelimit reads it in src/settings/settings.go, or
 * GRPC_SERVER_TLS_CA_CERT, as Envoy Gateway sets it). */
export interface GrpcTlsFiles {
  cert: string;
  key: string;
  /** Set: every client must present a certificate signed by this CA (mTLS), on every service of the port. */
  clientCa: string | undefined;
  /** The variable or flag that named the client CA, for messages. */
  clientCaFrom: string;
}

/** Certificates are re-read this often, so a rotated Secret (Envoy Gateway's, cert-manager's) is served without
 * a restart, as envoyproxy/ratelimit's cert provider does. */
const REFRESH_MS = 60_000;

/** Plaintext, or TLS from files that are watched for rotation. Resolves once the files are read, so the
 * first connections are not refused while they load; files that cannot be used (not PEM, a key that is not
 * the certificate's) are a ListenError: the port cannot be served. */
export async function grpcServerCredentials(tls: GrpcTlsFiles | undefined, refreshMs = REFRESH_MS): Promise<grpc.ServerCredentials> {
  if (!tls) return grpc.ServerCredentials.createInsecure();
  usable(tls);
  const { FileWatcherCertificateProvider, createCertificateProviderServerCredentials } = grpc.experimental;
  // The client CA is re-read as the certificate is: Envoy Gateway rotates both in one Secret.
  const identity = new FileWatcherCertificateProvider({ certificateFile: tls.cert, privateKeyFile: tls.key, refreshIntervalMs: refreshMs });
  const clients = tls.clientCa ? new FileWatcherCertificateProvider({ caCertificateFile: tls.clientCa, refreshIntervalMs: refreshMs }) : null;
  await loaded(
    (l) => identity.addIdentityCertificateListener(l),
    (l) => identity.removeIdentityCertificateListener(l),
    'GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY',
  );
  if (clients)
    await loaded(
      (l) => clients.addCaCertificateListener(l),
      (l) => clients.removeCaCertificateListener(l),
      tls.clientCaFrom,
    );
  return createCertificateProviderServerCredentials(identity, clients, clients !== null);
}

/** The provider reads files as they are; what they hold is first checked at a client's handshake. Checked
 * here, a file that is not PEM or a key that is not the certificate's stops the start instead. */
function usable(tls: GrpcTlsFiles): void {
  try {
    createSecureContext({ cert: readFileSync(tls.cert), key: readFileSync(tls.key), ...(tls.clientCa ? { ca: readFileSync(tls.clientCa) } : {}) });
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new ListenError(
      `cannot serve gRPC over TLS: GRPC_SERVER_TLS_CERT, GRPC_SERVER_TLS_KEY${tls.clientCa ? ` and ${tls.clientCaFrom}` : ''} cannot be used as ` +
        `TLS certificates (${code ?? 'invalid'})`,
    );
  }
}

type Listener = (update: unknown) => void;

/** Waits for a provider's first read: the provider keeps it for the server's own listener. */
function loaded(add: (l: Listener) => void, remove: (l: Listener) => void, what: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const listener: Listener = (update) => {
      remove(listener);
      if (update) resolve();
      else reject(new ListenError(`cannot serve gRPC over TLS: the files of ${what} cannot be used as TLS certificates`));
    };
    add(listener);
  });
}
