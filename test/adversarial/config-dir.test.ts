import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, renameSync, rmSync, symlinkSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ConfigError } from '../../src/config/errors.js';
import { metric, scrape } from '../helpers/metrics.js';
import { capturingLogger, type RlsRequest, startTestService, type TestService } from '../helpers/service.js';
import { within } from '../helpers/time.js';

// A config directory is operator input, and operators (and their tools) leave odd things in it. Whatever
// is there, the service keeps answering with the last good config, says once what is wrong and where,
// counts the failed reload, and picks up a good set as soon as there is one.

const domain = (perMinute: number, name = 'reload'): string => `
domain: ${name}
descriptors:
  - key: client
    rate_limit: {unit: minute, requests_per_unit: ${perMinute}, name: client-minute}
`;

const REJECTED = 'config reload rejected: keeping the last good config';
const probe: RlsRequest = { domain: 'reload', descriptors: [{ entries: [{ key: 'client', value: 'probe' }], hits_addend: { value: 0 } }] };

interface Hostile {
  dir: string;
  t: TestService;
  rejections: () => Record<string, unknown>[];
}

describe('a hostile config directory', () => {
  let t: TestService | undefined;
  const dirs: string[] = [];
  afterEach(async () => {
    await t?.close();
    t = undefined;
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });

  /** A service on a directory holding reload.yaml with 3 per minute, polled every 100 ms. */
  async function start(args: string[] = [], log = capturingLogger()): Promise<Hostile> {
    const parent = mkdtempSync(join(tmpdir(), 'tollgate-hostile-'));
    dirs.push(parent);
    const dir = join(parent, 'config');
    mkdirSync(dir);
    writeFileSync(join(dir, 'reload.yaml'), domain(3));
    t = await startTestService({ configDir: dir, args: ['--config-poll-ms', '100', ...args], logger: log.logger });
    expect(await limitNow(t)).toBe(3);
    return { dir, t, rejections: () => log.lines().filter((l) => l.msg === REJECTED) };
  }

  const limitNow = async (s: TestService): Promise<number | undefined> => (await s.rls.call(probe)).statuses[0]!.current_limit?.requests_per_unit;
  const failures = async (s: TestService): Promise<number | undefined> =>
    metric((await scrape(s.service.httpPort)).series, 'tollgate_config_reloads_total', { result: 'failure' });

  /** Waits for the one rejection, then checks the old limit still holds, the metric, and that it is not
   * reported again when the directory is read again unchanged. */
  async function expectRejected(h: Hostile, cause: { file: string; code: string }, message: RegExp): Promise<Record<string, unknown>> {
    await within(10_000, () => h.rejections().length > 0);
    const [line] = h.rejections();
    expect(line!.causes).toEqual([cause]);
    expect((line!.problems as string[]).join('\n')).toMatch(message);
    expect(line!.level).toBe(50);
    expect(await limitNow(h.t)).toBe(3);
    expect(await failures(h.t)).toBe(1);
    expect(await h.t.service.reload()).toBe('unchanged');
    expect(h.rejections()).toHaveLength(1);
    return line!;
  }

  it('a symlink loop named *.yaml: rejected with ELOOP, and the fix is picked up', async () => {
    const h = await start();
    symlinkSync('loop.yaml', join(h.dir, 'loop.yaml'));
    await expectRejected(h, { file: 'loop.yaml', code: 'ELOOP' }, /loop\.yaml: cannot read \(ELOOP: /);
    unlinkSync(join(h.dir, 'loop.yaml'));
    writeFileSync(join(h.dir, 'reload.yaml'), domain(4));
    await within(10_000, async () => (await limitNow(h.t)) === 4);
  });

  it('a directory named *.yaml: rejected, never opened', async () => {
    const h = await start();
    mkdirSync(join(h.dir, 'x.yaml'));
    await expectRejected(h, { file: 'x.yaml', code: 'NOT_A_FILE' }, /x\.yaml: not a regular file \(a directory\)/);
  });

  it('a FIFO named *.yaml: rejected at once, neither hanging the reload nor the service', async () => {
    const h = await start();
    execFileSync('mkfifo', [join(h.dir, 'x.yaml')]);
    await expectRejected(h, { file: 'x.yaml', code: 'NOT_A_FILE' }, /x\.yaml: not a regular file \(a FIFO\)/);
    // Reloads still run (a blocked read would hold the one reload slot forever).
    unlinkSync(join(h.dir, 'x.yaml'));
    writeFileSync(join(h.dir, 'reload.yaml'), domain(5));
    await within(10_000, async () => (await limitNow(h.t)) === 5);
  });

  it.skipIf(process.getuid?.() === 0)('a file it may not read: rejected with EACCES', async () => {
    const h = await start();
    writeFileSync(join(h.dir, 'secret.yaml'), domain(9, 'secret'));
    chmodSync(join(h.dir, 'secret.yaml'), 0o000);
    await expectRejected(h, { file: 'secret.yaml', code: 'EACCES' }, /secret\.yaml: cannot read \(EACCES: /);
  });

  it('a file over --max-config-bytes: rejected by its size before it is read, naming size and bound', async () => {
    const h = await start(['--max-config-bytes', '65536']);
    const big = `${domain(9, 'big')}${'# padding to make the file large\n'.repeat(4000)}`;
    writeFileSync(join(h.dir, 'big.yaml'), big);
    await expectRejected(
      h,
      { file: 'big.yaml', code: 'TOO_LARGE' },
      new RegExp(`big\\.yaml: ${Buffer.byteLength(big)} bytes, more than the maximum of 65536 bytes per file`),
    );
  });

  it('files adding up to more than the directory bound: rejected, naming the total and the bound', async () => {
    const h = await start(['--max-config-bytes', '4096']);
    for (let i = 0; i < 6; i++) writeFileSync(join(h.dir, `d${i}.yaml`), `${domain(9, `d${i}`)}${'#'.repeat(3000)}\n`);
    await expectRejected(h, { file: '.', code: 'TOO_LARGE' }, /more than the maximum of 16384 bytes per directory/);
  });

  it('an emptied directory: refused, every limit still enforced', async () => {
    const h = await start();
    unlinkSync(join(h.dir, 'reload.yaml'));
    await expectRejected(h, { file: '.', code: 'EMPTY' }, /no descriptor config left/);
    writeFileSync(join(h.dir, 'reload.yaml'), domain(6));
    await within(10_000, async () => (await limitNow(h.t)) === 6);
  });

  it('the directory deleted, then recreated: keeps serving, then loads the new one', async () => {
    const h = await start();
    rmSync(h.dir, { recursive: true });
    await expectRejected(h, { file: '.', code: 'ENOENT' }, /cannot read the config directory \(ENOENT: /);
    mkdirSync(h.dir);
    writeFileSync(join(h.dir, 'reload.yaml'), domain(7));
    await within(10_000, async () => (await limitNow(h.t)) === 7);
  });

  it('a file replaced while a reload of it runs: the reload finishes on what it read, the replacement follows', async () => {
    const log = capturingLogger('debug');
    const h = await start(['--config-poll-ms', '0'], log);
    // Large enough that its parse takes a while on the reader thread.
    const stage = join(h.dir, '..', 'stage.yaml');
    writeFileSync(stage, `${domain(5)}${bigDescriptors(20_000)}`);
    renameSync(stage, join(h.dir, 'reload.yaml'));
    const first = h.t.service.reload();
    // Read, and being parsed: now replace it.
    await within(10_000, () => log.lines().some((l) => l.msg === 'config directory changed: validating'));
    writeFileSync(stage, domain(9).replace('minute', 'fortnight'));
    renameSync(stage, join(h.dir, 'reload.yaml'));
    const second = h.t.service.reload();
    expect(h.t.service.reload()).toBe(second); // asked during the same reload: one more run, not two
    expect(await first).toBe('reloaded');
    expect(await limitNow(h.t)).toBe(5);
    expect(await second).toBe('rejected');
    expect(await limitNow(h.t)).toBe(5);
    expect(await failures(h.t)).toBe(1);
    expect(h.rejections()[0]!.problems).toEqual([expect.stringContaining('unknown unit "fortnight"')]);
    writeFileSync(stage, domain(8));
    renameSync(stage, join(h.dir, 'reload.yaml'));
    expect(await h.t.service.reload()).toBe('reloaded');
    expect(await limitNow(h.t)).toBe(8);
  }, 60_000);

  it('a file rewritten and replaced over and over while reloads run: only whole versions are ever served', async () => {
    const h = await start(['--config-poll-ms', '20']);
    const seen = new Set<number | undefined>();
    const stage = join(h.dir, '..', 'stage.yaml');
    for (let i = 0; i < 300; i++) {
      const version = `${domain(i % 2 === 0 ? 10 : 20)}${'# filler\n'.repeat(i % 50)}`;
      if (i % 3 === 0) {
        writeFileSync(stage, version);
        renameSync(stage, join(h.dir, 'reload.yaml'));
      } else writeFileSync(join(h.dir, 'reload.yaml'), version); // in place: a reader can see it half written
      void h.t.service.reload();
      if (i % 10 === 0) seen.add(await limitNow(h.t));
    }
    writeFileSync(join(h.dir, 'reload.yaml'), domain(30));
    await within(10_000, async () => (await limitNow(h.t)) === 30);
    // A half-written file is either rejected or, where it is valid YAML, a whole version: never a config
    // without the limit.
    expect([...seen].every((l) => l === 3 || l === 10 || l === 20)).toBe(true);
    expect((await failures(h.t)) ?? 0).toBe(h.rejections().length);
  }, 60_000);
});

describe('a hostile config directory at start', () => {
  it('serve refuses it with one line per problem, naming the entry and the cause', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tollgate-hostile-start-'));
    writeFileSync(join(dir, 'reload.yaml'), domain(3));
    symlinkSync('loop.yaml', join(dir, 'loop.yaml'));
    execFileSync('mkfifo', [join(dir, 'pipe.yaml')]);
    const started = startTestService({ configDir: dir });
    await expect(started).rejects.toThrow(ConfigError);
    await expect(started).rejects.toThrow(
      `${join(dir, 'loop.yaml')}: cannot read (ELOOP: too many symbolic links encountered)\n` +
        `${join(dir, 'pipe.yaml')}: not a regular file (a FIFO); only regular files or links to them are read`,
    );
    rmSync(dir, { recursive: true, force: true });
  });

  it('serve starts on an empty directory with a warning, as check-config passes it', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tollgate-empty-start-'));
    const log = capturingLogger();
    const t = await startTestService({ configDir: dir, logger: log.logger });
    expect(log.lines().find((l) => l.level === 40)).toMatchObject({ msg: 'no descriptor config found: every request will pass until one is added', dir });
    // From none to some is a reload like any other.
    writeFileSync(join(dir, 'reload.yaml'), domain(3));
    expect(await t.service.reload()).toBe('reloaded');
    expect((await t.rls.call(probe)).statuses[0]!.current_limit?.requests_per_unit).toBe(3);
    await t.close();
    rmSync(dir, { recursive: true, force: true });
  });
});

/** Many valid descriptors under a `tenant` key: a file that takes the reader thread a while to parse. */
function bigDescriptors(n: number): string {
  const lines: string[] = [];
  for (let i = 0; i < n; i++) lines.push(`  - key: tenant\n    value: t${i}\n    rate_limit: {unit: hour, requests_per_unit: ${i + 1}}\n`);
  return lines.join('');
}
