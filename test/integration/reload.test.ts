import { closeSync, mkdirSync, mkdtempSync, openSync, renameSync, rmSync, statSync, symlinkSync, writeFileSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { metric, scrape } from '../helpers/metrics.js';
import { capturingLogger, type RlsRequest, repeat, startTestService, type TestService } from '../helpers/service.js';
import { within } from '../helpers/time.js';

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
  (await t.rls.call({ ...req('probe'), descriptors: [{ entries: [{ key: 'client', value: 'probe' }], hits_addend: { value: 0 } }] })).statuses[0]!.current_limit
    ?.requests_per_unit;

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

  it('a limit moved to a token bucket starts fresh (logged); a bucket whose numbers change keeps its state', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tollgate-reload-'));
    writeFileSync(join(dir, 'reload.yaml'), domain(3));
    const log = capturingLogger();
    t = await startTestService({ configDir: dir, args: ['--config-poll-ms', '200'], logger: log.logger });
    expect(await admitted(t, 'tb', 4)).toBe(3);
    const reloads = (): number => log.lines().filter((l) => l.msg === 'config reloaded').length;

    writeFileSync(join(dir, 'reload.yaml'), domain(3).replace('name: client-minute', 'name: client-minute, algorithm: token_bucket'));
    await within(5000, async () => reloads() === 1);
    expect(log.lines().find((l) => l.msg === 'config reloaded')).toMatchObject({ changed: ['reload/client'], restarted: ['reload/client per_minute'] });
    expect(log.lines().some((l) => String(l.msg).startsWith('limits moved between a window and a token bucket'))).toBe(true);
    // The manual clock stands still: the bucket refills nothing, so a fresh one admits exactly its burst of 3.
    expect(await admitted(t, 'tb', 4)).toBe(3);

    writeFileSync(join(dir, 'reload.yaml'), domain(3).replace('name: client-minute', 'name: client-minute, algorithm: token_bucket, burst: 5'));
    await within(5000, async () => reloads() === 2);
    expect(log.lines().filter((l) => l.msg === 'config reloaded')[1]).toMatchObject({ changed: ['reload/client'], restarted: [] });
    // 3 tokens already taken: 2 more of the 5.
    expect(await admitted(t, 'tb', 4)).toBe(2);
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
    // Reported once, not on every poll: each check() is what a poll runs, and finds nothing new to say.
    for (let i = 0; i < 3; i++) expect(await t.service.reload()).toBe('unchanged');
    expect(log.lines().filter((l) => l.msg === 'config reload rejected: keeping the last good config')).toHaveLength(1);
    const { series } = await scrape(t.service.httpPort);
    expect(metric(series, 'tollgate_config_reloads_total', { result: 'failure' })).toBe(1);
    // Fixing the file is picked up.
    writeFileSync(join(dir, 'reload.yaml'), domain(6));
    await within(5000, async () => (await limitNow(t!)) === 6);
  });

  it('picks up a Kubernetes ConfigMap update (the ..data symlink swap)', async () => {
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

/** Sends decisions one after another until stopped; the longest wait between two answers is how long the
 * event loop was held (the service runs in this process). */
function decisionFlow(t: TestService): { answered: () => number; stop: () => Promise<{ maxGapMs: number; answered: number; errors: number }> } {
  let running = true;
  let maxGapMs = 0;
  let answered = 0;
  let errors = 0;
  const done = (async () => {
    let last = performance.now();
    while (running) {
      try {
        await t.rls.call(req('flow'));
        answered++;
      } catch {
        errors++;
      }
      const now = performance.now();
      if (now - last > 25) console.error(`GAP ${(now - last).toFixed(1)} ending at ${now.toFixed(0)}`);
      maxGapMs = Math.max(maxGapMs, now - last);
      last = now;
    }
  })();
  return {
    answered: () => answered,
    stop: async () => {
      running = false;
      await done;
      return { maxGapMs, answered, errors };
    },
  };
}

/** Writes `bytes` of valid descriptor YAML for domain `name` in 64 KiB writes (no 64 MB string). */
function writeLargeConfig(path: string, name: string, bytes: number): void {
  const fd = openSync(path, 'w');
  let written = writeSync(fd, `domain: ${name}\ndescriptors:\n`);
  for (let i = 0; written < bytes; ) {
    const lines: string[] = [];
    for (let size = 0; size < 65_536; i++) {
      const line = `  - key: client\n    value: c${i}\n    rate_limit: {unit: minute, requests_per_unit: ${(i % 100) + 1}}\n`;
      lines.push(line);
      size += line.length;
    }
    written += writeSync(fd, lines.join(''));
  }
  closeSync(fd);
}

describe('reloading large config without stalling decisions', () => {
  let t: TestService | undefined;
  const dirs: string[] = [];
  afterEach(async () => {
    await t?.close();
    t = undefined;
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });

  // The flow's bound is 250 ms: the design bound is 50 ms, but this is a loaded 2-core machine. A 3 MB
  // reload compiles ~47 MB of rules on the main thread in slices, and with the whole suite running beside it
  // a major GC can take 150-250 ms: that case is held to 1 s, still far below the 2.5 s stall it replaced.
  const MAX_GAP_MS = 250;
  const MAX_GAP_LARGE_RELOAD_MS = 1000;

  async function setup(): Promise<{ dir: string; stage: string; log: ReturnType<typeof capturingLogger> }> {
    const parent = mkdtempSync(join(tmpdir(), 'tollgate-large-'));
    dirs.push(parent);
    const dir = join(parent, 'config');
    mkdirSync(dir);
    writeFileSync(join(dir, 'reload.yaml'), domain(3));
    const log = capturingLogger();
    t = await startTestService({ configDir: dir, args: ['--config-poll-ms', '100'], logger: log.logger });
    return { dir, stage: join(parent, 'stage.yaml'), log };
  }

  it('a 64 MB file dropped in: rejected for its size, never read; decisions keep flowing', async () => {
    const { dir, stage, log } = await setup();
    writeLargeConfig(stage, 'huge', 64 * 1024 * 1024);
    const flow = decisionFlow(t!);
    await within(5000, () => flow.answered() > 20);
    renameSync(stage, join(dir, 'huge.yaml'));
    await within(20_000, () => log.lines().some((l) => l.msg === 'config reload rejected: keeping the last good config'));
    const gaps = await flow.stop();
    const line = log.lines().find((l) => l.msg === 'config reload rejected: keeping the last good config')!;
    const size = statSync(join(dir, 'huge.yaml')).size;
    expect(line.problems).toEqual([
      `${join(dir, 'huge.yaml')}: ${size} bytes (64.0 MiB), more than the maximum of 4194304 bytes (4.0 MiB) per file (--max-config-bytes)`,
    ]);
    expect(line.causes).toEqual([{ file: 'huge.yaml', code: 'TOO_LARGE' }]);
    expect(gaps.errors).toBe(0);
    expect(gaps.maxGapMs).toBeLessThan(MAX_GAP_MS);
    expect(await limitNow(t!)).toBe(3);
    const { series } = await scrape(t!.service.httpPort);
    expect(metric(series, 'tollgate_config_reloads_total', { result: 'failure' })).toBe(1);
    console.log(`64 MB file: ${gaps.answered} decisions, longest gap ${gaps.maxGapMs.toFixed(1)} ms`);
  }, 60_000);

  it('a ~3 MB valid file (under the bound) reloads while decisions keep flowing', async () => {
    const { dir, stage, log } = await setup();
    writeLargeConfig(stage, 'big', 3 * 1024 * 1024);
    const flow = decisionFlow(t!);
    await within(5000, () => flow.answered() > 20);
    renameSync(stage, join(dir, 'big.yaml'));
    const big = { domain: 'big', descriptors: [{ entries: [{ key: 'client', value: 'c1234' }], hits_addend: { value: 0 } }] };
    await within(40_000, async () => (await t!.rls.call(big)).statuses[0]!.current_limit?.requests_per_unit === 35);
    const gaps = await flow.stop();
    expect(gaps.errors).toBe(0);
    expect(gaps.maxGapMs).toBeLessThan(MAX_GAP_LARGE_RELOAD_MS);
    expect(await limitNow(t!)).toBe(3);
    const line = log.lines().find((l) => l.msg === 'config reloaded')!;
    expect((line.added as string[]).length).toBe(50); // thousands of rules: the first few named, all counted
    expect(line.addedCount).toBeGreaterThan(25_000);
    console.log(`3 MB file: ${gaps.answered} decisions, longest gap ${gaps.maxGapMs.toFixed(1)} ms`);
  }, 60_000);

  it('one reload at a time: a change made during one is loaded by one more run after it', async () => {
    const { dir, stage } = await setup();
    writeLargeConfig(stage, 'big', 1024 * 1024);
    renameSync(stage, join(dir, 'big.yaml'));
    const first = t!.service.reload();
    writeFileSync(join(dir, 'reload.yaml'), domain(4));
    const again = [t!.service.reload(), t!.service.reload(), t!.service.reload()];
    expect(new Set(again).size).toBe(1);
    expect(await first).toBe('reloaded');
    await Promise.all(again);
    expect(await limitNow(t!)).toBe(4);
    expect(await t!.service.reload()).toBe('unchanged');
  }, 60_000);
});
