import * as grpc from '@grpc/grpc-js';
import { ListenError } from '../errors.js';
import { KeptCertificates, type KeptEvents } from './kept-certificates.js';

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

/** The gRPC port's credentials, and why it cannot take new clients now (undefined when it can). */
export interface PortCredentials {
  credentials: grpc.ServerCredentials;
  problem(): string | undefined;
}

/** Plaintext, or TLS from files that are re-read for rotation, the last usable ones kept in force when they change
 * to ones that cannot be used (kept-certificates.ts). Resolves once the files are read, so the first connections
 * are not refused while they load; files that cannot be used at start (not PEM, a key that is not the
 * certificate's) are a ListenError: the port cannot be served. */
export async function grpcServerCredentials(tls: GrpcTlsFiles | undefined, refreshMs = REFRESH_MS, events?: KeptEvents): Promise<PortCredentials> {
  if (!tls) return { credentials: grpc.ServerCredentials.createInsecure(), problem: () => undefined };
  const kept = new KeptCertificates(tls, events ?? { onUnusable: () => undefined }, refreshMs);
  const code = await kept.start();
  if (code !== undefined) {
    throw new ListenError(
      `cannot serve gRPC over TLS: GRPC_SERVER_TLS_CERT, GRPC_SERVER_TLS_KEY${tls.clientCa ? ` and ${tls.clientCaFrom}` : ''} cannot be used as ` +
        `TLS certificates (${code})`,
    );
  }
  // One provider serves both: the client CA is re-read with the certificate, as Envoy Gateway rotates both in one
  // Secret. Without a client CA, no CA provider (no client certificate asked for).
  const credentials = grpc.experimental.createCertificateProviderServerCredentials(kept, tls.clientCa ? kept : null, tls.clientCa !== undefined);
  return { credentials, problem: () => kept.problem() };
}
