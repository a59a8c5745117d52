import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { type BrowserContext, chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from '../helpers/process.js';

// simulate --report, rendered by a real browser: Debian's chromium (scripts/system-programs.json).
const CHROMIUM = '/usr/bin/chromium';
const ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
];

describe('simulate --report', () => {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-report-'));
  const report = join(dir, 'report.html');
  let browser: BrowserContext;

  beforeAll(async () => {
    const traffic = join(dir, 'traffic.jsonl');
    expect((await runCli(['simulate', '--generate', '20000', '--out', traffic])).code).toBe(0);
    // B: the read limit raised from 10 to 14 per second, so the two configs differ where heavy clients burst.
    const raised = join(dir, 'raised');
    mkdirSync(raised);
    writeFileSync(
      join(raised, 'property-api.yaml'),
      readFileSync('config/property-api.yaml', 'utf8').replace(
        '{unit: second, requests_per_unit: 10, name: read-per-second}',
        '{unit: second, requests_per_unit: 14, name: read-per-second}',
      ),
    );
    const run = await runCli(['simulate', '--traffic', traffic, '--compare', raised, '--report', report]);
    expect(run.code).toBe(0);
    browser = await chromium.launchPersistentContext(mkdtempSync(join(tmpdir(), 'tollgate-chromium-')), {
      executablePath: CHROMIUM,
      headless: true,
      args: ARGS,
      viewport: { width: 1000, height: 1200 },
    });
  }, 30_000);
  afterAll(async () => browser?.close());

  it('is one self-contained file: nothing to fetch, no script', () => {
    const html = readFileSync(report, 'utf8');
    expect(html).not.toMatch(/<script|<link|<img|src=|href=|@import|url\(/i);
  });

  it('draws, per rule, requests and admitted under both configs on the same axes, and the most limited clients', async () => {
    const page = await browser.newPage();
    const requested: string[] = [];
    page.on('request', (r) => requested.push(r.url()));
    await page.goto(pathToFileURL(report).href);
    expect(requested).toEqual([pathToFileURL(report).href]);
    const charts = await page.$$eval('svg[role=img]', (svgs) =>
      svgs.map((svg) => ({
        series: [...svg.querySelectorAll('path.series')].map((p) => ({
          cls: p.getAttribute('class'),
          d: (p.getAttribute('d') ?? '').length,
          width: (p as unknown as { getBBox(): { width: number } }).getBBox().width,
        })),
        xLabels: [...svg.querySelectorAll('text.x-label')].map((t) => t.textContent),
        yLabels: [...svg.querySelectorAll('text.y-label')].map((t) => t.textContent),
        titles: [...svg.querySelectorAll('text.axis-title')].map((t) => t.textContent),
      })),
    );
    expect(charts.length).toBeGreaterThanOrEqual(6); // read, reports, write: per token and anonymous
    for (const c of charts) {
      expect(c.series.map((s) => s.cls)).toEqual(['series requests', 'series admitted-a', 'series admitted-b']);
      for (const s of c.series) {
        expect(s.d).toBeGreaterThan(20);
        expect(s.width).toBeGreaterThan(500);
      }
      expect(c.xLabels.length).toBeGreaterThanOrEqual(3);
      expect(c.xLabels.every((l) => /^\d\d:\d\d:\d\d$/.test(l ?? ''))).toBe(true);
      expect(c.yLabels[0]).toBe('0');
      expect(c.titles).toEqual([expect.stringMatching(/^requests per second/), 'time (UTC)']);
    }
    const heading = await page.$$eval('h2', (hs) => hs.map((h) => h.textContent));
    expect(heading).toContain('category_read.token (read) property-api');
    const limited = await page.$$eval('table.top', (ts) => ts.map((t) => t.querySelectorAll('tr').length - 1));
    expect(limited).toHaveLength(2);
    expect(limited[0]).toBeGreaterThan(0);
    const shot = join(dir, 'report.png');
    await page.screenshot({ path: shot, clip: { x: 0, y: 0, width: 1000, height: 760 } });
    expect(statSync(shot).size).toBeGreaterThan(20_000);
    // docs/tuning.md's picture: TOLLGATE_UPDATE_DOCS=1 npx vitest run test/integration/simulate-report.test.ts
    if (process.env.TOLLGATE_UPDATE_DOCS === '1') copyFileSync(shot, 'docs/simulate-report.png');
  });
});
