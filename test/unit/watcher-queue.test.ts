import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { configLimits, loadConfigDir } from '../../src/config/load.js';
import { ConfigWatcher, type ReloadOutcome } from '../../src/config/watcher.js';

const yaml = (n: number): string => `domain: q\ndescriptors:\n  - key: client\n    rate_limit: {unit: minute, requests_per_unit: ${n}}\n`;

/** Resolves to the outcomes, or to 'hung' if a reload promise is still pending after `ms`: the reader
 * answers these in milliseconds, so a promise still open after seconds is one that will never settle. */
async function settled(runs: Promise<ReloadOutcome>[], ms: number): Promise<ReloadOutcome[] | 'hung'> {
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<'hung'>((r) => (timer = setTimeout(() => r('hung'), ms)));
  try {
    return await Promise.race([Promise.all(runs), bound]);
  } finally {
    clearTimeout(timer);
  }
}

describe('config watcher: one reload at a time', () => {
  let watcher: ConfigWatcher | undefined;
  afterEach(() => watcher?.stop());

  function make(dir: string): { watcher: ConfigWatcher; reloads: () => number } {
    let reloads = 0;
    const w = new ConfigWatcher({
      dir,
      pollMs: 60_000,
      limits: configLimits(),
      current: loadConfigDir(dir),
      logger: pino({ level: 'silent' }),
      onReload: () => reloads++,
      onFailure: () => undefined,
    });
    return { watcher: w, reloads: () => reloads };
  }

  // The flaky reload test (issue 29): a check asked for while a reload ran was queued behind it; when that
  // reload ended, a caller resuming on it could ask again before the queued one started, and both ran at
  // once. The reader thread serves one request at a time, so one of the two promises never settled.
  it('a check asked for as a queued one is about to start joins it: every promise settles', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tollgate-watchq-'));
    writeFileSync(join(dir, 'q.yaml'), yaml(3));
    const m = make(dir);
    watcher = m.watcher;
    writeFileSync(join(dir, 'q.yaml'), yaml(4));
    const first = watcher.check();
    // A caller resuming on the reload it asked for asks again (as the reload test does), and its
    // continuation runs before the check a poll queued during that reload.
    const next = first.then(() => watcher!.check());
    const queued = watcher.check(); // as a poll does during a reload
    const outcomes = await settled([first, queued, next], 10_000);
    expect(outcomes).not.toBe('hung');
    expect(outcomes).toEqual(['reloaded', 'unchanged', 'unchanged']);
    expect(m.reloads()).toBe(1);
  });

  it('a burst of 200 checks during reloads: all settle, each change applied once', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tollgate-watchq-'));
    writeFileSync(join(dir, 'q.yaml'), yaml(3));
    const m = make(dir);
    watcher = m.watcher;
    const runs: Promise<ReloadOutcome>[] = [];
    for (let round = 0; round < 4; round++) {
      writeFileSync(join(dir, 'q.yaml'), yaml(10 + round));
      for (let i = 0; i < 50; i++) {
        runs.push(watcher.check());
        if (i % 10 === 0) await runs[runs.length - 1];
      }
    }
    const outcomes = await settled(runs, 20_000);
    expect(outcomes).not.toBe('hung');
    expect(m.reloads()).toBe(4);
  });
});
