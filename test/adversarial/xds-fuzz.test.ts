/** A round-based fuzzer of the xDS client (soak-lib.ts: the invariants after each round): a real `tollgate
 * serve` with CONFIG_TYPE=GRPC_XDS_SOTW against a hostile management server of this test's own (xds-round.ts):
 * valid, invalid and random RateLimitConfig resources, garbage and oversize frames, huge version_info and nonces,
 * floods, resets, GOAWAYs, slow trickles, and transports that are not what Tollgate expects (plaintext for TLS,
 * TLS for plaintext, the wrong CA, the wrong name, a demand for a client certificate, raw garbage, hangs). After
 * each round Tollgate must come back to a good server, ACK its config and answer by it. In `npm test` a few short
 * rounds against the TLS client; `npm run fuzz` runs both clients for as long as it is given. */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Rng } from './fuzz-lib.js';
import type { SoakSpec } from './soak-lib.js';
import { soakBudget } from './soak-lib.js';
import { SoakProcess } from './soak-process.js';
import { soakRun } from './soak-run.js';
import { CHECK_DOMAIN } from './xds-behaviours.js';
import type { TlsFiles } from './xds-hostile.js';
import { NODE_ID, XdsArena } from './xds-round.js';

const budget = soakBudget(2, [1000, 1500]);

/** A CA and certificates it signed, with P-256 keys (an RSA key takes openssl a second or two on a busy machine,
 * an EC one milliseconds): `<name>.pem` and `<name>.key` per entry, `ca.pem`. */
function ecCertificates(entries: { name: string; san: string }[], dirs: string[]): (file: string) => string {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-fuzz-certs-'));
  dirs.push(dir);
  const ssl = (...args: string[]): void => void execFileSync('openssl', args, { cwd: dir, stdio: 'ignore' });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  ssl('req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=tollgate-fuzz-ca');
  for (const { name, san } of entries) {
    ssl('req', ...ec, '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${name}`);
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
  return (file) => join(dir, file);
}

/** Certificates for the name Tollgate checks, from its CA and from another, and another name from its CA. */
function certificates(dirs: string[]): { files: TlsFiles; ca: string } {
  const ours = ecCertificates(
    [
      { name: 'ads', san: 'DNS:xds.fuzz' },
      { name: 'other', san: 'DNS:other.fuzz' },
    ],
    dirs,
  );
  const theirs = ecCertificates([{ name: 'ads', san: 'DNS:xds.fuzz' }], dirs);
  const pair = (file: (f: string) => string, name: string) => ({ key: readFileSync(file(`${name}.key`)), cert: readFileSync(file(`${name}.pem`)) });
  return {
    files: { good: pair(ours, 'ads'), wrongCa: pair(theirs, 'ads'), wrongName: pair(ours, 'other'), ca: readFileSync(ours('ca.pem')) },
    ca: ours('ca.pem'),
  };
}

function spec(tls: boolean): SoakSpec {
  let arena: XdsArena | undefined;
  const dirs: string[] = [];
  return {
    suite: 'xds',
    start: async (scanner) => {
      const certs = tls ? certificates(dirs) : undefined;
      arena = new XdsArena(new Rng([...scanner.marker].reduce((h, c) => Math.imul(h ^ c.charCodeAt(0), 0x01000193), 0x811c9dc5)), certs?.files);
      const port = await arena.start();
      const args = ['--config-type', 'GRPC_XDS_SOTW', '--xds-server-url', `127.0.0.1:${port}`, '--xds-node-id', NODE_ID];
      // Quick to come back, so a round's restore takes a second, not a minute (the defaults are 10 s and 60 s).
      args.push('--xds-backoff-initial', '100ms', '--xds-backoff-max', '400ms', '--xds-connect-retry-interval', '100ms');
      const env = certs
        ? { CONFIG_GRPC_XDS_SERVER_USE_TLS: 'true', CONFIG_GRPC_XDS_SERVER_TLS_CACERT: certs.ca, CONFIG_GRPC_XDS_SERVER_TLS_SAN: 'xds.fuzz' }
        : {};
      const target = await SoakProcess.start(tls ? 'TLS client' : 'plaintext client', args, scanner, undefined, env);
      // The known descriptor is checked before the first round: the canonical config must be in force.
      const problem = await arena.restore(target.httpPort, -1);
      if (problem) {
        await target.close();
        throw new Error(`before the first round: ${problem}`);
      }
      return target;
    },
    round: (ctx) => arena!.round(ctx),
    settle: async (ctx) => {
      const problem = await arena!.restore(ctx.target.httpPort, ctx.index);
      arena!.report(ctx);
      return problem;
    },
    known: { domain: CHECK_DOMAIN, key: 'check', limit: 5 },
    // The rounds' configs may change or drop the probe's domain: its answers are judged as decided, in time.
    probe: { domain: CHECK_DOMAIN, key: 'probe', limit: 1000, exact: false },
    close: async () => {
      await arena?.stop();
      for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
    },
  };
}

const timeout = budget.ms + 120_000;

describe.concurrent(`the xDS client under a hostile management server (${budget.soak ? 'soak' : 'smoke'})`, () => {
  if (budget.soak) {
    it(
      'plaintext',
      async () => {
        const run = await soakRun(spec(false), budget);
        expect(run.problems, run.message).toBe(0);
      },
      timeout,
    );
  }

  it(
    'TLS',
    async () => {
      const run = await soakRun(spec(true), budget);
      expect(run.problems, run.message).toBe(0);
      expect(run.summary.rounds).toBeGreaterThan(0);
    },
    timeout,
  );
});
