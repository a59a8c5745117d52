import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadConfigDir } from '../../src/config/load.js';
import { loadEnvoyConfig } from '../../src/envoy/routes.js';
import { fingerprint } from '../../src/fingerprint.js';
import { explain } from '../../src/limiter/explain.js';
import { generateDefaults, generateTraffic } from '../../src/tuning/generate.js';
import { Simulation, type SimulationReport } from '../../src/tuning/simulate.js';
import { readTraffic } from '../../src/tuning/traffic.js';
import { jsonOf } from '../helpers/json.js';
import { runCli } from '../helpers/process.js';
import { configDir, property, repeat, startTestService } from '../helpers/service.js';

const envoy = loadEnvoyConfig('envoy/envoy.yaml');
const T0 = Date.UTC(2026, 10, 21, 10, 0, 0);

/** A traffic file in a fresh directory. */
function trafficFile(lines: string[], name = 'traffic.jsonl'): string {
  const dir = configDir({});
  const file = join(dir, name);
  writeFileSync(file, `${lines.join('\n')}\n`);
  return file;
}

const reads = (n: number, token: string, startMs = T0, stepMs = 50): string[] =>
  Array.from({ length: n }, (_, i) =>
    JSON.stringify({ timestamp: new Date(startMs + i * stepMs).toISOString(), method: 'GET', path: '/invoices', authorization: token }),
  );

async function simulate(
  file: string,
  dir = 'config',
  tiers: { fingerprint: string; tier: string; assignedAt: string; by: string }[] = [],
): Promise<SimulationReport> {
  const sim = new Simulation(loadConfigDir(dir), envoy, tiers);
  for await (const line of readTraffic(file)) await sim.feed(line);
  return sim.report();
}

const rule = (r: SimulationReport, id: string) => r.rules.find((x) => x.rule === id)!;

describe('tollgate simulate', () => {
  it('a cost per line is charged as its hits: 5 reads of cost 4 in one second against 10 a second admit 2', async () => {
    const lines = reads(5, 'Bearer costly').map((l) => JSON.stringify({ ...JSON.parse(l), cost: 4 }));
    const r = await simulate(trafficFile(lines));
    expect({ admitted: r.admitted, rejected: r.rejected }).toEqual({ admitted: 2, rejected: 3 });
  });

  it('15 reads in one second for one token: 10 admitted, 5 rejected', async () => {
    const r = await simulate(trafficFile(reads(15, 'Bearer one')));
    expect({ admitted: r.admitted, rejected: r.rejected }).toEqual({ admitted: 10, rejected: 5 });
    expect(rule(r, 'category_read.token')).toMatchObject({
      category: 'read',
      requests: 15,
      admitted: 10,
      rejected: 5,
      peakPerSecond: 15,
      peakAdmittedPerSecond: 10,
    });
    expect(r.topLimited).toEqual([{ fingerprint: fingerprint('one'), requests: 15, rejected: 5 }]);
  });

  it('the same reads spread over two seconds are all admitted', async () => {
    const r = await simulate(trafficFile(reads(15, 'Bearer two', T0, 130)));
    expect(r.rejected).toBe(0);
  });

  it('reads CSV, Envoy access-log field names, and fingerprints instead of tokens', async () => {
    const fp = fingerprint('csv-client');
    const csv = [
      'start_time,method,path,fingerprint',
      ...Array.from({ length: 8 }, (_, i) => `${(T0 + i * 10) / 1000},POST,/invoices,${fp}`),
      `${T0 / 1000},GET,/healthz,${fp}`,
    ];
    const r = await simulate(trafficFile(csv, 'traffic.csv'));
    expect(rule(r, 'category_write.token')).toMatchObject({ requests: 8, admitted: 5, rejected: 3 });
    expect(r.notLimited).toBe(1);
    expect(r.topLimited[0]).toEqual({ fingerprint: fp, requests: 8, rejected: 3 });
  });

  it('applies tier assignments given by fingerprint', async () => {
    const tiers = [{ fingerprint: fingerprint('big'), tier: 'multi-property-group', assignedAt: '', by: '' }];
    const r = await simulate(trafficFile(reads(35, 'Bearer big', T0, 20)), 'config', tiers);
    expect(r.admitted).toBe(30);
  });

  it('a bucketed read limit (10/s, burst 20): after an idle gap, a burst admits exactly the burst', async () => {
    const bucketed = configDir({
      'property-api.yaml': readFileSync('config/property-api.yaml', 'utf8').replace(
        '{unit: second, requests_per_unit: 10, name: read-per-second}',
        '{unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 20, name: read-per-second}',
      ),
    });
    const steady = reads(3, 'Bearer tb', T0, 1000);
    const burst = reads(40, 'Bearer tb', T0 + 60_000, 1);
    const r = await simulate(trafficFile([...steady, ...burst]), bucketed);
    expect(rule(r, 'category_read.token')).toMatchObject({ requests: 43, admitted: 23, rejected: 20 });
  });

  it('--compare shows a raised limit admitting more', async () => {
    const raised = configDir({
      'property-api.yaml': readFileSync('config/property-api.yaml', 'utf8').replace(
        '{unit: second, requests_per_unit: 10, name: read-per-second}',
        '{unit: second, requests_per_unit: 12, name: read-per-second}',
      ),
    });
    const file = trafficFile(reads(15, 'Bearer cmp'));
    const run = await runCli(['simulate', '--traffic', file, '--compare', raised, '--json']);
    expect(run.code).toBe(0);
    const out = JSON.parse(run.stdout);
    const read = out.comparison.rules.find((x: { rule: string }) => x.rule === 'category_read.token');
    expect(read).toMatchObject({ admitted: [10, 12], rejected: [5, 3] });
    const text = await runCli(['simulate', '--traffic', file, '--compare', raised]);
    expect(text.stdout).toMatch(/admitted 10 → 12 \(\+2\), rejected 5 → 3 \(-2\)/);
  });

  it('--generate writes a repeatable sample whose heavy clients get limited', async () => {
    const a = [...generateTraffic({ ...generateDefaults, lines: 3000 })];
    const b = [...generateTraffic({ ...generateDefaults, lines: 3000 })];
    expect(a).toEqual(b);
    const dir = configDir({});
    const out = join(dir, 'sample.jsonl');
    expect((await runCli(['simulate', '--generate', '20000', '--out', out])).code).toBe(0);
    const run = await runCli(['simulate', '--traffic', out]);
    expect(run.stdout).toMatch(/^20,000 requests: /);
    const r = await simulate(out);
    expect(r.lines).toBe(20_000);
    expect(r.topLimited.length).toBeGreaterThan(0);
    expect(r.rejected).toBeGreaterThan(0);
    expect(r.notLimited).toBeGreaterThan(0);
  });

  it('a bad line is reported with its number', async () => {
    const run = await runCli(['simulate', '--traffic', trafficFile(['{"timestamp": "2026-11-21T10:00:00Z", "method": "GET", "path": "/modules"}', '{oops'])]);
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/traffic\.jsonl: 1 bad line: line 2: not valid JSON/);
  });
});

describe('tollgate explain', () => {
  const RULES = `
domain: paths
descriptors:
  - key: path
    value: /admin/exact
    rate_limit: {unit: second, requests_per_unit: 2, name: admin-exact}
  - key: path
    value: /admin*
    rate_limit: {unit: second, requests_per_unit: 1, name: admin-prefix}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 6, name: any-path}
`;
  const config = loadConfigDir(configDir({ 'paths.yaml': RULES }));
  const why = async (path: string) =>
    (await explain(config, { tierOf: () => undefined }, { domain: 'paths', descriptors: [{ entries: [{ key: 'path', value: path }] }], hits: 1 }))
      .descriptors[0]!;

  it('names the rule and how it matched: exact, wildcard, default', async () => {
    expect(await why('/admin/exact')).toMatchObject({ steps: [{ matched: 'exact' }], limits: [{ name: 'admin-exact' }] });
    expect(await why('/admin/users')).toMatchObject({ steps: [{ matched: 'wildcard', pattern: '/admin*' }], limits: [{ name: 'admin-prefix' }] });
    expect(await why('/public')).toMatchObject({ steps: [{ matched: 'default' }], rule: { id: 'path' }, limits: [{ name: 'any-path' }] });
  });

  it('the CLI explains the property API, showing tokens only as fingerprints', async () => {
    const run = await runCli(['explain', 'property-api', 'category=read', 'token=Bearer secret-value']);
    expect(run.code).toBe(0);
    expect(run.stdout).toContain('category: exact value  (config/property-api.yaml:14)');
    expect(run.stdout).toContain('token: default key');
    expect(run.stdout).toContain('rule category_read.token');
    expect(run.stdout).toContain('a burst is stopped first by read-per-second');
    expect(run.stdout).toContain(fingerprint('secret-value'));
    expect(run.stdout).not.toContain('secret-value');
    const none = await runCli(['explain', 'property-api', 'category=admin']);
    expect(none.stdout).toContain('no descriptor matches category="admin"');
  });

  it('the CLI shows what the user typed, lists what the config has where nothing matched, and suggests the nearest', async () => {
    const value = await runCli(['explain', 'property-api', 'category=raed', 'token=Bearer typed-secret']);
    expect(value.stdout).toContain('descriptor 0: category="raed", "token"=fingerprint:');
    expect(value.stdout).toContain("the config's values of category here: read, reports, write");
    expect(value.stdout).toContain('did you mean category=read?');
    expect(value.stdout).not.toContain('typed-secret'); // the token's value stays a fingerprint, even here
    const key = await runCli(['explain', 'property-api', 'categry=read']);
    expect(key.stdout).toContain("the config's keys here: category");
    expect(key.stdout).toContain('did you mean category?');
    const far = await runCli(['explain', 'property-api', 'category=zzzzzz']);
    expect(far.stdout).toContain("the config's values of category here");
    expect(far.stdout).not.toContain('did you mean');
  });

  it('the CLI takes what Envoy adds to a descriptor: its limit (@limit) and hits (@hits), as a decision would', async () => {
    const run = await runCli(['explain', 'property-api', 'category=read', 'token=t', '@limit=5/minute']);
    expect(run.code).toBe(0);
    expect(run.stdout).toContain("Envoy's per-descriptor limit replaces the config's");
    expect(run.stdout).toContain('5 per minute');
    const json = await runCli(['explain', '--json', '--hits', '4', 'property-api', 'category=read', 'token=t', '+', 'category=write', 'token=t', '@hits=0']);
    const hits = (JSON.parse(json.stdout) as { descriptors: { hits: number }[] }).descriptors.map((d) => d.hits);
    expect(hits).toEqual([4, 0]);
    const bad = await runCli(['explain', 'property-api', 'category=read', '@limit=5/fortnight']);
    expect(bad.code).toBe(2);
    expect(bad.stderr.trim().split('\n')).toEqual([
      'tollgate: @limit takes N/UNIT, e.g. @limit=5/minute (units: second, minute, hour, day, month, year, week)',
    ]);
  });

  it('POST /explain adds live counters and says which window would reject', async () => {
    const t = await startTestService();
    try {
      await repeat(t.rls, property('reports', 'Bearer live'), 2);
      const res = await fetch(`http://127.0.0.1:${t.service.httpPort}/explain`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ domain: 'property-api', descriptors: [{ entries: property('reports', 'Bearer live').descriptors[0]!.entries }] }),
      });
      expect(res.status).toBe(200);
      const body = await jsonOf(res);
      expect(body.descriptors[0].rule.id).toBe('category_reports.token');
      expect(body.descriptors[0].limits).toEqual([
        {
          name: 'reports-per-second',
          requestsPerUnit: 2,
          unit: 'second',
          window: 'second',
          algorithm: 'fixed_window',
          used: 2,
          remaining: 0,
          wouldReject: true,
        },
        {
          name: 'reports-per-hour',
          requestsPerUnit: 200,
          unit: 'hour',
          window: 'hour',
          algorithm: 'fixed_window',
          used: 2,
          remaining: 198,
          wouldReject: false,
        },
      ]);
      expect(JSON.stringify(body)).not.toContain('Bearer live');
    } finally {
      await t.close();
    }
  });

  it('shows a value only when the config holds it: wildcard and default matches by fingerprint', async () => {
    const wildcard = await why('/admin/s3cr3t');
    expect(wildcard.steps[0]).toMatchObject({
      entry: 0,
      key: 'path',
      value: `fingerprint:${fingerprint('/admin/s3cr3t')}`,
      valueBytes: 13,
      matched: 'wildcard',
    });
    expect((await why('/admin/exact')).steps[0]!.value).toBe('/admin/exact');
    expect(JSON.stringify(await why('/s3cr3t'))).not.toContain('s3cr3t');
  });

  it('POST /explain shows no request text: unknown domain, unknown keys, tokens under any key', async () => {
    const t = await startTestService();
    const SECRET = 'Bearer s3cr3t-anywhere';
    const ask = async (body: unknown) => {
      const res = await fetch(`http://127.0.0.1:${t.service.httpPort}/explain`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      expect(res.status).toBe(200);
      const text = await res.text();
      expect(text).not.toContain('s3cr3t');
      return JSON.parse(text);
    };
    try {
      const unknown = await ask({
        domain: 's3cr3t-domain',
        descriptors: [
          {
            entries: [
              { key: 's3cr3t-key', value: SECRET },
              { key: 'token', value: SECRET },
            ],
          },
        ],
      });
      expect(unknown).toMatchObject({ domain: `fingerprint:${fingerprint('s3cr3t-domain')}`, domainBytes: 13, known: false });
      expect(unknown.descriptors[0].steps[0]).toMatchObject({
        entry: 0,
        key: `fingerprint:${fingerprint('s3cr3t-key')}`,
        keyBytes: 10,
        valueBytes: SECRET.length,
      });
      const elsewhere = await ask({
        domain: 'property-api',
        descriptors: [
          { entries: [{ key: 'category', value: SECRET }] },
          {
            entries: [
              { key: 'category', value: 'read' },
              { key: 's3cr3t-key', value: SECRET },
            ],
          },
          {
            entries: [
              { key: 'category', value: 'read' },
              { key: 'token', value: 'Bearer x' },
              { key: 'extra', value: SECRET },
            ],
          },
        ],
      });
      expect(elsewhere.descriptors[0].steps[0]).toMatchObject({ key: 'category', value: `fingerprint:${fingerprint(SECRET)}`, matched: 'none' });
      expect(elsewhere.descriptors[0].reason).toContain(`no descriptor matches category=fingerprint:${fingerprint(SECRET)}`);
      expect(elsewhere.descriptors[1].steps[0]).toMatchObject({ key: 'category', value: 'read', matched: 'exact' });
      expect(elsewhere.descriptors[1].reason).toMatch(/^entry 1: no descriptor for its key \(fingerprint:[0-9a-f]{32}\) at this level/);
      expect(elsewhere.descriptors[2].steps[2]).toMatchObject({ entry: 2, matched: 'none' });
    } finally {
      await t.close();
    }
  });
});
