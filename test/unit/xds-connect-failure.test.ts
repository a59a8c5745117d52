import * as grpc from '@grpc/grpc-js';
import { describe, expect, it } from 'vitest';
import { connectFailure } from '../../src/xds/connect-failure.js';

/** grpc-js's words for a call that never had a connection, as it writes them (seen against real servers in
 * test/integration/xds-connect.test.ts), and what Tollgate makes of them. */
const unavailable = (details: string): grpc.ServiceError =>
  Object.assign(new Error(details), { code: grpc.status.UNAVAILABLE, details, metadata: new grpc.Metadata() });
const noConnection = (last: string): grpc.ServiceError => unavailable(`No connection established. Last error: ${last}. Resolution note: `);

describe('connectFailure', () => {
  it.each([
    ['Error: connect ECONNREFUSED 127.0.0.1:1', 'refused', 'connect ECONNREFUSED 127.0.0.1:1'],
    ['Error: connect ETIMEDOUT 10.0.0.1:18000', 'unreachable', 'connect ETIMEDOUT 10.0.0.1:18000'],
    ['Error: self-signed certificate in certificate chain', 'tls_handshake', 'self-signed certificate in certificate chain'],
    ['Error: unable to verify the first certificate', 'tls_handshake', 'unable to verify the first certificate'],
    ['Error: certificate has expired', 'tls_handshake', 'certificate has expired'],
    [
      "Error [ERR_TLS_CERT_ALTNAME_INVALID]: Hostname/IP does not match certificate's altnames: Host: a. is not in the cert's altnames: DNS:b",
      'certificate_name',
      "Hostname/IP does not match certificate's altnames: Host: a. is not in the cert's altnames: DNS:b",
    ],
    [
      '80DCA357147F0000:error:0A00045C:SSL routines:ssl3_read_bytes:tlsv13 alert certificate required:' +
        '../deps/openssl/openssl/ssl/record/rec_layer_s3.c:1601:SSL alert number 116\n (2026-11-25T18:37:15.539Z)',
      'client_certificate',
      'tlsv13 alert certificate required',
    ],
    [
      'Error: 80DCA357147F0000:error:0A00010B:SSL routines:ssl3_get_record:wrong version number:../deps/openssl/openssl/ssl/record/ssl3_record.c:350:\n',
      'plaintext_peer',
      'wrong version number',
    ],
    ['Failed to connect (2026-11-25T18:37:15.655Z)', 'closed', 'Failed to connect'],
    ['Error: read ECONNRESET', 'closed', 'read ECONNRESET'],
    ['something new', 'other', 'something new'],
  ])('%s: %s', (last, reason, detail) => {
    expect(connectFailure(noConnection(last))).toEqual({ reason, detail });
  });

  it('a name that does not resolve', () => {
    expect(connectFailure(unavailable('Name resolution failed for target dns:nowhere.invalid:1'))?.reason).toBe('dns');
  });

  it('a stream that broke once connected, or another status, is not a failure to connect', () => {
    expect(connectFailure(unavailable('Connection dropped'))).toBeUndefined();
    expect(connectFailure(Object.assign(noConnection('x'), { code: grpc.status.INTERNAL }))).toBeUndefined();
  });

  it("the server's words are shown bounded and printable", () => {
    const f = connectFailure(noConnection(`Error: certificate for \u001b[2J${'n'.repeat(10_000)}`))!;
    expect(f.detail.length).toBeLessThan(160);
    expect(f.detail).toMatch(/^certificate for \?\[2Jn+… \(\d+ characters\)$/);
  });
});
