import { readFileSync } from 'node:fs';
import { connect, createServer, type Server, type Socket } from 'node:net';
import * as grpc from '@grpc/grpc-js';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { AdsServer, type Resource } from '../helpers/ads-server.js';
import { metric, scrape } from '../helpers/metrics.js';
import { freePort } from '../helpers/process.js';
import { capturingLogger, startTestService, type TestService } from '../helpers/service.js';
import { within } from '../helpers/time.js';
import { makeCertificates } from '../helpers/tls.js';

/** Issue 36, items 10 and 11: every failed attempt to connect to the xDS server says why (one log line per
 * change of reason, counted by reason in tollgate_xds_connect_failures_total), and the server's strings
 * (version, error text) are logged bounded and printable. Before, a wrong CA, a plaintext server, a name
 * mismatch or a missing client certificate left no log line and no series, and a 1 MiB version_info was
 * logged whole at every stream's open and break. */

const limit = (perMinute: number): Resource => ({
  config: { name: 'api', domain: 'xds', descriptors: [{ key: 'client', rate_limit: { unit: 'MINUTE', requests_per_unit: perMinute } }] },
});
/** The limit in force, or undefined while no config has been applied (RLS answers UNAVAILABLE until then). */
const limitNow = async (t: TestService): Promise<number | undefined> =>
  (await t.rls.call({ domain: 'xds', descriptors: [{ entries: [{ key: 'client', value: 'probe' }] }], hits_addend: 0 }).catch(() => undefined))?.statuses[0]
    ?.current_limit?.requests_per_unit;
const xdsArgs = (port: number): string[] => [
  '--config-type',
  'GRPC_XDS_SOTW',
  '--xds-server-url',
  `127.0.0.1:${port}`,
  '--xds-backoff-initial',
  '100ms',
  '--xds-backoff-max',
  '200ms',
  '--xds-connect-retry-interval',
  '100ms',
];
const failures = async (t: TestService, reason: string): Promise<number> =>
  metric((await scrape(t.service.httpPort)).series, 'tollgate_xds_connect_failures_total', { reason }) ?? 0;

/** A TCP port whose connections go to whichever backend the test names now: the service's target stays one
 * address while what answers there changes at once, with no moment of nothing listening in between. */
class Switchboard {
  private backend = 0;
  private readonly sockets = new Set<Socket>();
  private readonly server: Server = createServer((inbound) => {
    const outbound = connect(this.backend, '127.0.0.1');
    for (const s of [inbound, outbound]) {
      this.sockets.add(s);
      s.on('error', () => undefined);
      s.on('close', () => {
        this.sockets.delete(s);
        inbound.destroy();
        outbound.destroy();
      });
    }
    inbound.pipe(outbound).pipe(inbound);
  });

  listen(port: number): Promise<void> {
    return new Promise((resolve) => this.server.listen(port, '127.0.0.1', resolve));
  }

  to(port: number): void {
    this.backend = port;
  }

  close(): void {
    for (const s of this.sockets) s.destroy();
    this.server.close();
  }
}

let t: TestService | undefined;
let cleanup: (() => void)[] = [];
afterEach(async () => {
  await t?.close();
  for (const c of cleanup) c();
  t = undefined;
  cleanup = [];
});

async function adsServer(credentials: grpc.ServerCredentials, push = false): Promise<number> {
  const ads = new AdsServer();
  if (push) ads.push('v1', [limit(2)]);
  const port = await ads.start(0, credentials);
  cleanup.push(() => ads.stop());
  return port;
}

describe('xDS connection failures, each with its reason', () => {
  let a: (f: string) => string;
  let b: (f: string) => string;
  beforeAll(() => {
    a = makeCertificates([
      { name: 'server', san: 'DNS:xds.internal' },
      { name: 'misnamed', san: 'DNS:someone.else' },
    ]).file;
    b = makeCertificates([{ name: 'server', san: 'DNS:xds.internal' }]).file; // another CA: not trusted
  }, 30_000);

  const tls = (ca: (f: string) => string, name: string, mutual = false): grpc.ServerCredentials =>
    grpc.ServerCredentials.createSsl(
      readFileSync(a('ca.pem')),
      [{ private_key: readFileSync(ca(`${name}.key`)), cert_chain: readFileSync(ca(`${name}.pem`)) }],
      mutual,
    );

  it('refused, plaintext peer, untrusted certificate, wrong name, client certificate required: a line per change, counted per attempt', async () => {
    const port = await freePort();
    const log = capturingLogger();
    t = await startTestService({
      args: xdsArgs(port),
      logger: log.logger,
      env: { CONFIG_GRPC_XDS_SERVER_USE_TLS: 'true', CONFIG_GRPC_XDS_SERVER_TLS_CACERT: a('ca.pem'), CONFIG_GRPC_XDS_SERVER_TLS_SAN: 'xds.internal' },
    });
    const reasons = (): unknown[] =>
      log
        .lines()
        .filter((l) => String(l.msg).startsWith('cannot connect to the xDS server'))
        .map((l) => l.reason);
    const seen = async (reason: string): Promise<void> => {
      // Two attempts at least: the second, for the same reason, adds to the count and no line.
      await within(10_000, async () => reasons().at(-1) === reason && (await failures(t!, reason)) >= 2, reason);
    };
    await seen('refused'); // nothing listens yet
    const board = new Switchboard();
    cleanup.push(() => board.close());
    board.to(await adsServer(grpc.ServerCredentials.createInsecure()));
    await board.listen(port);
    await seen('plaintext_peer');
    board.to(await adsServer(tls(b, 'server')));
    await seen('tls_handshake');
    board.to(await adsServer(tls(a, 'misnamed')));
    await seen('certificate_name');
    board.to(await adsServer(tls(a, 'server', true)));
    await seen('client_certificate');
    board.to(await adsServer(tls(a, 'server'), true));
    await within(10_000, async () => (await limitNow(t!)) === 2, 'connected at last: the config applied');

    expect(reasons()).toEqual(['refused', 'plaintext_peer', 'tls_handshake', 'certificate_name', 'client_certificate']);
    const lines = log.lines().filter((l) => String(l.msg).startsWith('cannot connect to the xDS server'));
    expect(lines.map((l) => l.detail)).toEqual([
      expect.stringMatching(/ECONNREFUSED/),
      'wrong version number',
      expect.stringMatching(/certificate/),
      expect.stringMatching(/^Hostname\/IP does not match certificate's altnames/),
      expect.stringMatching(/alert certificate required/),
    ]);
    expect(lines[2]!.msg).toMatch(/not trusted \(CONFIG_GRPC_XDS_SERVER_TLS_CACERT\)/);
    expect(await failures(t, 'other')).toBe(0);
    expect(log.lines().some((l) => l.msg === 'xDS server answered')).toBe(true);
  });

  it('TLS off against a TLS server: the server closes the connection, said so', async () => {
    const port = await adsServer(tls(a, 'server'), true);
    const log = capturingLogger();
    t = await startTestService({ args: xdsArgs(port), logger: log.logger });
    await within(10_000, async () => (await failures(t!, 'closed')) >= 2, 'closed');
    const lines = log.lines().filter((l) => String(l.msg).startsWith('cannot connect to the xDS server'));
    expect(lines).toHaveLength(1);
    expect(lines[0]!.msg).toMatch(/closed the connection while it was set up \(a TLS server while CONFIG_GRPC_XDS_SERVER_USE_TLS is off/);
  });
});

describe('xDS server strings in the log', () => {
  it('a 1 MiB version_info with control characters: bounded and printable at every open, break and apply', async () => {
    const version = `v1\n\u001b[31mFAKE "level":50\r${'x'.repeat(1024 * 1024)}`;
    const log = capturingLogger();
    const board = new Switchboard();
    cleanup.push(() => board.close());
    const port = await freePort();
    const first = new AdsServer();
    first.push(version, [limit(3)]);
    board.to(await first.start());
    await board.listen(port);
    t = await startTestService({ args: xdsArgs(port), logger: log.logger });
    await within(10_000, async () => (await limitNow(t!)) === 3, 'applied');
    await within(5000, () => first.requests().some((r) => r.version_info === version), 'ACKed');
    // The server ends its streams after the ACK, three times: each break and reopen logs the applied version.
    let server = first;
    for (let i = 0; i < 3; i++) {
      const next = new AdsServer();
      next.push(version, [limit(3)]);
      board.to(await next.start());
      server.stop();
      server = next;
      // The new stream's first request says which version is applied: the whole 1 MiB of it.
      await within(10_000, () => next.requests().some((r) => r.version_info === version), `reopened ${i}`);
    }
    cleanup.push(() => server.stop());
    const mentioning = log.lines().filter((l) => /xDS/.test(String(l.msg)) && (l.version !== undefined || l.keeping !== undefined));
    expect(mentioning.length).toBeGreaterThanOrEqual(7); // first apply, 3 breaks, 4 opens
    for (const l of mentioning) {
      const shown = String(l.version ?? l.keeping);
      if (shown === '') continue; // the first open, before anything was applied
      expect(shown).toMatch(new RegExp(`^v1\\?\\?\\[31mFAKE "level":50\\?x+… \\(${version.length} characters\\)$`));
      expect(shown.length).toBeLessThan(160);
    }
    const bytes = log.lines().reduce((n, l) => n + JSON.stringify(l).length, 0);
    expect(bytes).toBeLessThan(20_000); // was 1 MiB a line
  });
});
