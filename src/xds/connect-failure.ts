import * as grpc from '@grpc/grpc-js';
import { shown } from '../config/rls-conf.js';

/** Why a connection to the xDS management server failed: the label of tollgate_xds_connect_failures_total. */
export const CONNECT_FAILURE_REASONS = [
  'refused',
  'unreachable',
  'dns',
  'tls_handshake',
  'certificate_name',
  'client_certificate',
  'plaintext_peer',
  'closed',
  'other',
] as const;
export type ConnectFailureReason = (typeof CONNECT_FAILURE_REASONS)[number];

export interface ConnectFailure {
  reason: ConnectFailureReason;
  /** grpc-js's (or Node's, or OpenSSL's) words for it, bounded and printable: they may quote the server's
   * certificate names. */
  detail: string;
}

/** What each reason means for the operator, with the setting to look at. */
export const CONNECT_FAILURE_TEXT: Record<ConnectFailureReason, string> = {
  refused: 'nothing listens at that address (connection refused)',
  unreachable: 'the address cannot be reached',
  dns: "the server's name does not resolve",
  tls_handshake: "TLS handshake failed: the server's certificate is not trusted (CONFIG_GRPC_XDS_SERVER_TLS_CACERT), or no TLS could be agreed",
  certificate_name: "the server's certificate does not hold the name expected (CONFIG_GRPC_XDS_SERVER_TLS_SAN, else the URL's host)",
  client_certificate: 'the server asks for a client certificate, and none was sent or it refused the one sent (CONFIG_GRPC_XDS_CLIENT_TLS_CERT/_KEY)',
  plaintext_peer: 'the server does not speak TLS (CONFIG_GRPC_XDS_SERVER_USE_TLS=true)',
  closed:
    'the server closed the connection while it was set up (a TLS server while CONFIG_GRPC_XDS_SERVER_USE_TLS is off, or one refusing the client certificate)',
  other: 'the connection failed',
};

/** The call never had a connection: grpc-js fails a call that does not wait for one with these words when
 * the channel is in TRANSIENT_FAILURE (load-balancer-pick-first.ts, calculateAndReportNewState: "No connection
 * established. Last error: <the subchannel's error>. Resolution note: …"), or when the name did not resolve
 * (resolving-load-balancer.ts: "Name resolution failed for target …"). */
const NO_CONNECTION = /^No connection established\. Last error: ([\s\S]*?)(?:\. Resolution note: [\s\S]*)?$/;
const NO_RESOLUTION = /^Name resolution failed/;

/** Checked in order, against the subchannel's error: Node's errno and TLS codes, and OpenSSL's reasons. */
const RULES: [ConnectFailureReason, RegExp][] = [
  ['refused', /ECONNREFUSED/],
  ['unreachable', /ETIMEDOUT|EHOSTUNREACH|ENETUNREACH|EADDRNOTAVAIL/],
  ['certificate_name', /ERR_TLS_CERT_ALTNAME_INVALID|does not match certificate's altnames/],
  ['client_certificate', /alert (certificate required|bad certificate|unknown ca|certificate unknown|access denied)/],
  ['plaintext_peer', /wrong version number|packet length too long|unknown protocol|http request/],
  ['closed', /Failed to connect|ECONNRESET|EPIPE|socket hang up|Connection closed/],
  ['tls_handshake', /certificate|SSL|TLS|self[- ]signed|unable to (get|verify)/i],
];

/** The failure to connect a stream's error stands for, or undefined for a stream that broke once it had a
 * connection (the caller's other path). */
export function connectFailure(err: grpc.ServiceError): ConnectFailure | undefined {
  if (err.code !== grpc.status.UNAVAILABLE) return undefined;
  const details = err.details ?? '';
  if (NO_RESOLUTION.test(details)) return { reason: 'dns', detail: shown(details) };
  const last = NO_CONNECTION.exec(details)?.[1];
  if (last === undefined) return undefined;
  const reason = RULES.find(([, re]) => re.test(last))?.[0] ?? 'other';
  return { reason, detail: shown(plain(last)) };
}

/** The error's own words: without "Error [CODE]: ", grpc-js's trailing timestamp, and of an OpenSSL error
 * ("80DC…:error:0A00045C:SSL routines:ssl3_read_bytes:tlsv13 alert certificate required:../deps/…") its reason. */
function plain(text: string): string {
  const openssl = /error:[0-9A-F]+:[^:]*:[^:]*:([^:]+)/.exec(text);
  if (openssl) return openssl[1]!;
  return text
    .replace(/^\w*Error(?: \[\w+\])?: /, '')
    .replace(/\s*\(\d{4}-\d\d-\d\dT[\d:.]+Z\)\s*$/, '')
    .trim();
}
