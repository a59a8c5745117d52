import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { type Daemon, freePort, runCli, startCli } from '../helpers/process.js';
import { healthClient, property, RlsClient } from '../helpers/service.js';
import { within } from '../helpers/time.js';

// The built CLI, as `npm start` and users run it (`npm test` builds first).
describe('tollgate CLI', () => {
  let daemon: Daemon | undefined;
  afterEach(() => {
    daemon?.child.kill('SIGKILL');
    daemon = undefined;
  });

  it('serve: answers on the gRPC port with the bundled config, then exits 0 on SIGTERM after calls in flight', async () => {
    const [grpcPort, httpPort] = [await freePort(), await freePort()];
    daemon = await startCli(['serve', '--http-port', String(httpPort)], /tollgate serving/, { GRPC_PORT: String(grpcPort), LOG_LEVEL: 'info' });
    expect(daemon.output()).toContain(`"grpcPort":${grpcPort}`);
    const rls = new RlsClient(grpcPort);
    const first = await rls.call(property('read', 'Bearer cli-token'));
    expect(first.overall_code).toBe('OK');

    const health = healthClient(grpcPort);
    const serving = await new Promise<{ status: number }>((resolve, reject) =>
      health.Check({ service: '' }, (err: Error | null, res: { status: number }) => (err ? reject(err) : resolve(res))),
    );
    expect(serving.status).toBe(1);
    health.close();

    // Keep calls flowing while the signal lands: each must be answered or cleanly refused, none may hang.
    const outcomes: string[] = [];
    const loop = (async () => {
      for (let i = 0; i < 2000 && outcomes.length < 2000; i++) {
        try {
          outcomes.push((await rls.call(property('write', 'Bearer cli-token'))).overall_code);
        } catch (err) {
          outcomes.push(`error ${(err as { code: number }).code}`);
          break;
        }
      }
    })();
    await within(10_000, () => outcomes.length >= 5);
    daemon.child.kill('SIGTERM');
    expect(await daemon.exited).toBe(0);
    await loop;
    expect(outcomes[0]).toBe('OK');
    // After the signal: only answers or UNAVAILABLE (14), the code a client retries elsewhere.
    expect(outcomes.every((o) => o === 'OK' || o === 'OVER_LIMIT' || o === 'error 14')).toBe(true);
    expect(daemon.output()).toContain('tollgate stopped');
    expect(daemon.output()).not.toContain('cli-token');
    rls.close();
  });

  it('serve: a broken config exits 1 with file, line and key', async () => {
    const run = await runCli(['serve', '--config', 'test/fixtures/config/duplicate-domain', '--grpc-port', '0', '--http-port', '0']);
    expect(run.code).toBe(1);
    expect(run.stderr).toContain('duplicate-domain/b.yaml:2:1: domain:');
  });

  it('check-config: lists the rules of a good directory', async () => {
    const run = await runCli(['check-config', 'config']);
    expect(run.code).toBe(0);
    expect(run.stdout).toContain('category_read.token  10/second + 1000/hour');
    expect(run.stdout).toContain('tier multi-property-group: 30/second + 1000/hour');
    expect(run.stdout).toMatch(/OK: 1 domain\(s\)/);
  });

  it('check-config --xds-overlay: the shipped overlay on what Envoy Gateway generates; an entry that takes nothing; a bad one', async () => {
    const overlay = 'examples/envoy-gateway/overlay.yaml';
    const run = await runCli(['check-config', '--xds-overlay', overlay, 'examples/envoy-gateway/generated']);
    expect([run.code, run.stderr]).toEqual([0, '']);
    expect(run.stdout).toContain(
      '.rule-0-match-0  1000/hour  [fixed_window, charge_mode, reservation_key request_id, reservation_ttl 600s, settlement_key settle_id]',
    );
    expect(run.stdout).toContain('.rule-1-match-0  2000000/calendar month  [fixed_window, charge_mode]');
    expect(run.stdout).toContain('tier gold: 20000000/calendar month');
    const dir = mkdtempSync(join(tmpdir(), 'tollgate-overlay-cli-'));
    const gone = 'overlays:\n  - domain: default/envoy-ai-gateway-token-ratelimit/http\n    descriptors: [{key: gone}]\n    set: {charge_mode: true}\n';
    writeFileSync(join(dir, 'o.yaml'), `${gone}  - domain: other\n    set: {algorithm: token_bucket}\n`);
    const missed = await runCli(['check-config', '--xds-overlay', join(dir, 'o.yaml'), 'examples/envoy-gateway/generated']);
    expect(missed.code).toBe(0);
    expect(missed.stderr).toContain('o.yaml:2: overlay entry: the domain has no descriptor at this path; nothing set');
    expect(missed.stderr).toContain('o.yaml:5: overlay entry: no config has its domain; nothing set');
    // A dump with a key twice is refused as plain check-config refuses it; a directory as the overlay, cleanly.
    mkdirSync(join(dir, 'dump'));
    writeFileSync(join(dir, 'dump', 'd.yaml'), 'domain: d\ndescriptors:\n  - key: k\n    key: j\n');
    const twice = await runCli(['check-config', '--xds-overlay', join(dir, 'o.yaml'), join(dir, 'dump')]);
    expect(twice.code).toBe(1);
    expect(twice.stderr).toMatch(/d\.yaml:4:\d+: .*key/i);
    // A dump whose descriptors are not a list of mappings is reported by validation, never a crash.
    mkdirSync(join(dir, 'odd'));
    writeFileSync(join(dir, 'odd', 'a.yaml'), 'domain: odd\ndescriptors: {a: 1}\n');
    writeFileSync(join(dir, 'odd', 'b.yaml'), 'domain: odd2\ndescriptors: [null, {key: k, descriptors: 5}]\n');
    const oddOverlay = 'overlays:\n  - {domain: odd, descriptors: [{key: a}], set: {charge_mode: true}}\n';
    writeFileSync(join(dir, 'odd.yaml'), `${oddOverlay}  - {domain: odd2, descriptors: [{key: k}, {key: j}], set: {charge_mode: true}}\n`);
    const odd = await runCli(['check-config', '--xds-overlay', join(dir, 'odd.yaml'), join(dir, 'odd')]);
    expect(odd.code).toBe(1);
    expect(odd.stderr).not.toMatch(/TypeError|\n\s+at /);
    expect(odd.stderr).toMatch(/a\.yaml:\d+:\d+: descriptors: must be a list/);
    const notAFile = await runCli(['check-config', '--xds-overlay', dir]);
    expect([notAFile.code, notAFile.stderr.trim()]).toEqual([1, expect.stringMatching(/: not a regular file\n1 problem\(s\); nothing loaded\.$/)]);
    writeFileSync(join(dir, 'bad.yaml'), 'overlays:\n  - domain: x\n    set: {rate_limit: {unit: hour}}\n');
    const bad = await runCli(['check-config', '--xds-overlay', join(dir, 'bad.yaml')]);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/bad\.yaml:3:\d+: overlays\[0\]\.set\.rate_limit: unknown key \(allowed: response_headers, tiers, token_key, algorithm\)/);
  });

  it("check-config: a limit whose own algorithm is not its rule's says so (issue 22, item 9)", async () => {
    const run = await runCli(['check-config', 'test/fixtures/config-good/token-bucket.yaml']);
    expect(run.code).toBe(0);
    expect(run.stdout).toContain('mixed  10/second (token_bucket, burst 20) + 1000/hour  [fixed_window]');
  });

  it('check-config: names calendar windows, charge mode, reservations, settlements and in-flight rules (issue 62, item 5)', async () => {
    const run = await runCli(['check-config', 'examples']);
    expect(run.code).toBe(0);
    expect(run.stdout).toContain(
      'tenant  50000000/calendar month  [fixed_window, charge_mode, reservation_key request_id, reservation_ttl 600s, settlement_key settle_id]',
    );
    expect(run.stdout).toContain('tier enterprise: 10000000000/calendar month');
    expect(run.stdout).toContain('reservation_ttl 600s, settlement_key settle_id, usage ledger (values: tenant model)]');
    expect(run.stdout).toContain('tenant  20 at once  [in_flight, lease 30s, max_hold 900s, request_key request_id]');
    const explained = await runCli(['explain', '--config', 'examples', 'llm', 'tenant=acme', 'request_id=r1']);
    expect(explained.stdout).toContain('charge mode: hits_addend 0 checks');
    expect(explained.stdout).toContain('the last entry (request_id) names a reservation');
    expect(explained.stdout).toContain('limit tokens-per-month: 50000000 per calendar month');
    // A multiplier is said too (explain said "per minute" of a 5-minute window).
    const dir = mkdtempSync(join(tmpdir(), 'tollgate-multiplier-'));
    writeFileSync(
      join(dir, 'm.yaml'),
      'domain: m\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, unit_multiplier: 5, requests_per_unit: 10, name: five}\n',
    );
    expect((await runCli(['check-config', dir])).stdout).toContain('k  10/5 minutes  [fixed_window]');
    expect((await runCli(['explain', '--config', dir, 'm', 'k=v'])).stdout).toContain('limit five: 10 per 5 minutes');
  });

  it('check-config: exits 1 with precise errors', async () => {
    const run = await runCli(['check-config', 'test/fixtures/config']);
    expect(run.code).toBe(1);
    expect(run.stderr).toContain('test/fixtures/config/bad-unit.yaml:5:13: descriptors[0].rate_limit.unit: unknown unit "fortnight"');
    expect(run.stderr).toContain('test/fixtures/config/burst-below-one.yaml:5:62: descriptors[0].rate_limit.burst: must be at least 1');
    expect(run.stderr).toMatch(/\d+ problem\(s\); nothing loaded/);
  });

  it('check-config: an empty directory passes with the warning serve logs for it', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tollgate-empty-'));
    const run = await runCli(['check-config', dir]);
    expect(run.code).toBe(0);
    expect(run.stderr).toBe(`tollgate: warning: ${dir}: no descriptor config found: every request will pass until one is added\n`);
    expect(run.stdout).toMatch(/^OK: 0 domain\(s\)/);
  });

  it('check-config: an unreadable entry is one line naming it and the cause, not a stack', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tollgate-loop-'));
    symlinkSync('loop.yaml', join(dir, 'loop.yaml'));
    const run = await runCli(['check-config', dir]);
    expect(run.code).toBe(1);
    expect(run.stderr).toBe(`${join(dir, 'loop.yaml')}: cannot read (ELOOP: too many symbolic links encountered)\n1 problem(s); nothing loaded.\n`);
  });

  it('check-config: --max-config-bytes (or MAX_CONFIG_BYTES) bounds a file as serve does', async () => {
    const { size } = statSync('config/property-api.yaml');
    const flag = await runCli(['check-config', '--max-config-bytes', '1000', 'config']);
    expect(flag.code).toBe(1);
    expect(flag.stderr).toContain(`config/property-api.yaml: ${size} bytes, more than the maximum of 1000 bytes per file (--max-config-bytes)`);
    expect((await runCli(['check-config', 'config'], { MAX_CONFIG_BYTES: '1000' })).code).toBe(1);
    expect((await runCli(['check-config', '--max-config-bytes', '4096', 'config'], { MAX_CONFIG_BYTES: '1000' })).code).toBe(0);
    const bad = await runCli(['check-config', '--max-config-bytes', 'lots', 'config']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toBe('tollgate: --max-config-bytes must be a positive whole number (got "lots")\n');
  });

  it('fingerprint: SHA-256 of the token without its Bearer scheme', async () => {
    const run = await runCli(['fingerprint', 'Bearer abc']);
    expect(run.code).toBe(0);
    expect(run.stdout.trim()).toBe(createHash('sha256').update('abc').digest('hex').slice(0, 32));
  });

  it.each(['serve', 'check-config', 'fingerprint'])('%s --help', async (command) => {
    const run = await runCli([command, '--help']);
    expect(run.code).toBe(0);
    expect(run.stdout).toContain(`Usage: tollgate ${command}`);
  });

  it('rejects unknown flags and commands with usage and exit 2', async () => {
    const flag = await runCli(['serve', '--nope']);
    expect(flag.code).toBe(2);
    expect(flag.stderr).toMatch(/nope/);
    const command = await runCli(['frobnicate']);
    expect(command.code).toBe(2);
    expect(command.stderr).toContain('unknown command');
  });
});
