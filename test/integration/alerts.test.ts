import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { loadEnvoyConfig } from '../../src/envoy/routes.js';

// The alerting rules as Prometheus itself reads them: promtool checks the file and runs its unit tests, in which
// every alert fires on a synthetic series and stays quiet without it. No service runs in this file.

const RULES = 'deploy/prometheus/rules/tollgate.rules.yml';
const TESTS = 'deploy/prometheus/rules/tollgate.rules.test.yml';
const OPERATOR = 'deploy/kubernetes/components/monitoring/prometheusrule.yaml';

interface Rule {
  alert?: string;
  record?: string;
  expr: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}
interface UnitTest {
  name: string;
  alert_rule_test: { alertname: string; exp_alerts: unknown[] }[];
}

const groups = (parse(readFileSync(RULES, 'utf8')) as { groups: { name: string; rules: Rule[] }[] }).groups;
const alerts = groups.flatMap((g) => g.rules).filter((r) => r.alert);
const unitTests = (parse(readFileSync(TESTS, 'utf8')) as { tests: UnitTest[] }).tests;

function promtool(...args: string[]): { status: number | null; out: string } {
  const r = spawnSync('promtool', args, { encoding: 'utf8' });
  return { status: r.status, out: r.stdout + r.stderr };
}

describe('alerting rules', () => {
  it('pass promtool check rules', () => {
    const r = promtool('check', 'rules', RULES);
    expect(r.out).toMatch(/SUCCESS: \d+ rules found/);
    expect(r.status).toBe(0);
  });

  // promtool's unit tests evaluate every case's series: seconds on a quiet machine, past 20 beside two busy
  // loops (issue 59). Work, not a timing bound: a minute each.
  it("pass promtool's unit tests", () => {
    const r = promtool('test', 'rules', TESTS);
    expect(r.out).toContain('SUCCESS');
    expect(r.status).toBe(0);
  }, 60_000);

  it.each(alerts.map((a) => a.alert!))('%s has a case that fires it and one that stays quiet', (name) => {
    const cases = unitTests.flatMap((t) => t.alert_rule_test).filter((c) => c.alertname === name);
    expect(cases.filter((c) => c.exp_alerts.length > 0).length, 'firing cases').toBeGreaterThan(0);
    expect(cases.filter((c) => c.exp_alerts.length === 0).length, 'quiet cases').toBeGreaterThan(0);
  });

  it('the unit tests fail when an alert stops firing (its expression broken)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'tollgate-rules-'));
    const broken = readFileSync(RULES, 'utf8').replace('increase(tollgate_unchecked_total[5m])) > 0', 'increase(tollgate_unchecked_total[5m])) > 1e9');
    expect(broken).not.toBe(readFileSync(RULES, 'utf8'));
    writeFileSync(join(dir, 'tollgate.rules.yml'), broken);
    copyFileSync(TESTS, join(dir, 'tollgate.rules.test.yml'));
    const r = promtool('test', 'rules', join(dir, 'tollgate.rules.test.yml'));
    expect(r.status).not.toBe(0);
    expect(r.out).toMatch(/FAILED[\s\S]*alertname: TollgateUnchecked/);
  }, 60_000);

  it("the Prometheus Operator's PrometheusRule holds the same groups", () => {
    const operator = parse(readFileSync(OPERATOR, 'utf8')) as { kind: string; spec: { groups: unknown } };
    expect(operator.kind).toBe('PrometheusRule');
    expect(operator.spec.groups).toEqual(groups);
  });

  it("the latency alert fires at 80 % of Envoy's rate-limit filter timeout in envoy.yaml", () => {
    const latency = alerts.find((a) => a.alert === 'TollgateLatencyNearEnvoyTimeout')!;
    const threshold = Number(/\)\s*>\s*([\d.]+)\s*$/.exec(latency.expr.trim())?.[1]);
    expect(threshold).toBeCloseTo((0.8 * loadEnvoyConfig('envoy/envoy.yaml').timeoutMs) / 1000, 6);
  });
});

describe('runbooks', () => {
  const SECTIONS = ['## What it means', '## How to confirm', '## What to do'];

  it.each(alerts.map((a) => [a.alert!, a]))('%s: severity, summary, description and a runbook with the three sections', (name, alert) => {
    expect(['critical', 'warning']).toContain(alert.labels?.severity);
    expect(alert.annotations?.summary).toBeTruthy();
    expect(alert.annotations?.description).toBeTruthy();
    expect(alert.annotations?.runbook_url).toBe(`docs/runbooks/${name}.md`);
    const page = readFileSync(alert.annotations!.runbook_url!, 'utf8');
    for (const s of SECTIONS) expect(page, s).toContain(`\n${s}\n`);
  });

  it('every page belongs to an alert, and the index lists every alert', () => {
    const pages = readdirSync('docs/runbooks').filter((f) => f !== 'README.md');
    expect(pages.sort()).toEqual(alerts.map((a) => `${a.alert}.md`).sort());
    const index = readFileSync('docs/runbooks/README.md', 'utf8');
    for (const a of alerts) expect(index).toContain(`[${a.alert}](${a.alert}.md)`);
    expect(existsSync('docs/runbooks/README.md')).toBe(true);
  });
});
