import { mkdirSync, mkdtempSync, renameSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { metric, scrape } from '../helpers/metrics.js';
import { within } from '../helpers/time.js';
import { capturingLogger, repeat, startTestService, type RlsRequest, type TestService } from '../helpers/service.js';

const domain = (perMinute: number): string => `
domain: reload
descriptors:
  - key: client
    rate_limit: {unit: minute, requests_per_unit: ${perMinute}, name: client-minute}
`;

const req = (client: string): RlsRequest => ({ domain: 'reload', descriptors: [{ entries: [{ key: 'client', value: client }] }] });
const admitted = async (t: TestService, client: string, n: number): Promise<number> =>
  (await repeat(t.rls, req(client), n)).filter((r) => r.overall_code === 'OK').length;

const limitNow = async (t: TestService): Promise<number | undefined> =>
  (await t.rls.call({ ...req('probe'), descriptors: [{ entries: [{ key: 'client', value: 'probe' }], hits_addend: { value: 0 } }] }))
    .statuses[0]!.current_limit?.requests_per_unit;

describe('hot reload of the config directory', () => {
  let t: TestService | undefined;
  afterEach(async () => t?.close());

  it('applies a new limit within seconds and keeps the counters', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tollgate-reload-'));
    writeFileSync(join(dir, 'reload.yaml'), domain(3));
    const log = capturingLogger();
    t = await startTestService({ configDir: dir, args: ['--config-poll-ms', '200'], logger: log.logger });
    expect(await admitted(t, 'kept', 2)).toBe(2);

    writeFileSync(join(dir, 'reload.yaml'), domain(4));
    await within(5000, async () => (await limitNow(t!)) === 4);
    // 2 were counted before the change: 2 more fit under the new limit, not 4.
    expect(await admitted(t, 'kept', 5)).toBe(2);
    const line = log.lines().find((l) => l.msg === 'config reloaded');
    expect(line).toMatchObject({ changed: ['reload/client'], added: [], removed: [] });
    const { series } = await scrape(t.service.httpPort);
    expect(metric(series, 'tollgate_config_reloads_total', { result: 'success' })).toBe(1);
  });

  it('keeps the last good config when a file breaks, and says where', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tollgate-reload-'));
    writeFileSync(join(dir, 'reload.yaml'), domain(3));
    const log = capturingLogger();
    t = await startTestService({ configDir: dir, args: ['--config-poll-ms', '100'], logger: log.logger });
    writeFileSync(join(dir, 'reload.yaml'), domain(9).replace('minute', 'fortnight'));
    await within(5000, async () => log.lines().some((l) => l.msg === 'config reload rejected: keeping the last good config'));
    const line = log.lines().find((l) => l.msg === 'config reload rejected: keeping the last good config')!;
    expect(line.problems).toEqual([expect.stringContaining(`${join(dir, 'reload.yaml')}:5:24: descriptors[0].rate_limit.unit: unknown unit "fortnight"`)]);
    expect(line.level).toBe(50);
    expect(await limitNow(t)).toBe(3);
    expect(await admitted(t, 'broken', 4)).toBe(3);
    // Reported once, not on every poll.
    await new Promise((r) => setTimeout(r, 400));
    expect(log.lines().filter((l) => l.msg === 'config reload rejected: keeping the last good config')).toHaveLength(1);
    const { series } = await scrape(t.service.httpPort);
    expect(metric(series, 'tollgate_config_reloads_total', { result: 'failure' })).toBe(1);
    // Fixing the file is picked up.
    writeFileSync(join(dir, 'reload.yaml'), domain(6));
    await within(5000, async () => (await limitNow(t!)) === 6);
  });

  it("picks up a Kubernetes ConfigMap update (the ..data symlink swap)", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tollgate-configmap-'));
    const version = (name: string, perMinute: number): void => {
      mkdirSync(join(dir, name));
      writeFileSync(join(dir, name, 'reload.yaml'), domain(perMinute));
    };
    version('..2026_11_21_10_00_00.000000001', 3);
    symlinkSync('..2026_11_21_10_00_00.000000001', join(dir, '..data'));
    symlinkSync('..data/reload.yaml', join(dir, 'reload.yaml'));
    t = await startTestService({ configDir: dir, args: ['--config-poll-ms', '5000'] });
    expect(await limitNow(t)).toBe(3);

    // What the kubelet does: write the new version, point ..data_tmp at it, rename over ..data.
    version('..2026_11_21_10_05_00.000000002', 7);
    symlinkSync('..2026_11_21_10_05_00.000000002', join(dir, '..data_tmp'));
    renameSync(join(dir, '..data_tmp'), join(dir, '..data'));
    await within(5000, async () => (await limitNow(t!)) === 7);
  });
});
