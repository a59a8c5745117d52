import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** A private CA and certificates it signed, made with openssl in a fresh directory: `<name>.pem` and
 * `<name>.key` per entry, `ca.pem` for the CA. */
export function makeCertificates(entries: { name: string; san: string }[]): { dir: string; file: (f: string) => string } {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-certs-'));
  const ssl = (...args: string[]): void => void execFileSync('openssl', args, { cwd: dir, stdio: 'ignore' });
  ssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=tollgate-test-ca');
  for (const { name, san } of entries) {
    ssl('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${name}`);
    writeFileSync(join(dir, `${name}.cnf`), `subjectAltName=${san}\n`);
    ssl(
      'x509',
      '-req',
      '-in',
      `${name}.csr`,
      '-CA',
      'ca.pem',
      '-CAkey',
      'ca.key',
      '-CAcreateserial',
      '-out',
      `${name}.pem`,
      '-days',
      '2',
      '-extfile',
      `${name}.cnf`,
    );
  }
  return { dir, file: (f) => join(dir, f) };
}
