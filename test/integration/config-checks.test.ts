import { cpSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, formatProblem } from '../../src/config/errors.js';
import { compileSources, loadConfigDir } from '../../src/config/load.js';
import { scrape } from '../helpers/metrics.js';
import { runCli } from '../helpers/process.js';
import { capturingLogger, startTestService } from '../helpers/service.js';

const PROPERTY = readFileSync('config/property-api.yaml', 'utf8');

function dirWith(files: Record<string, string>): string {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-checks-'));
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
  return dir;
}

function problems(files: Record<string, string>): string[] {
  try {
    compileSources(Object.entries(files).map(([file, text]) => ({ file, text })));
  } catch (err) {
    if (err instanceof ConfigError) return err.problems.map(formatProblem);
    throw err;
  }
  return [];
}

const hashOf = async (path: string): Promise<string> => /config hash ([0-9a-f]+)/.exec((await runCli(['check-config', path])).stdout)![1]!;

describe('the config hash is of content only', () => {
  it('check-config prints one hash for the same files however the path is spelt, and for a copy elsewhere', async () => {
    const copy = mkdtempSync(join(tmpdir(), 'tollgate-mounted-'));
    cpSync('config', copy, { recursive: true });
    const hashes = await Promise.all([
      hashOf('config'),
      hashOf(join(process.cwd(), 'config')),
      hashOf(`./config/`),
      hashOf(relative(process.cwd(), copy) || copy),
      hashOf(copy),
    ]);
    expect(new Set(hashes).size).toBe(1);
    // Content still counts: another name or another byte is another hash.
    const renamed = dirWith({ 'other-name.yaml': PROPERTY });
    const edited = dirWith({ 'property-api.yaml': `${PROPERTY}\n` });
    expect(await hashOf(renamed)).not.toBe(hashes[0]);
    expect(await hashOf(edited)).not.toBe(hashes[0]);
  });

  it("a running service reports check-config's hash in tollgate_config_info, at start and after a reload (the reader thread)", async () => {
    const validated = await hashOf('config');
    const mounted = dirWith({ 'property-api.yaml': PROPERTY });
    const t = await startTestService({ configDir: mounted, args: ['--config-poll-ms', '0'] });
    try {
      const info = async (): Promise<string | undefined> => /tollgate_config_info\{hash="([0-9a-f]+)"\} 1/.exec((await scrape(t.service.httpPort)).text)?.[1];
      expect(await info()).toBe(validated);
      const next = PROPERTY.replace('requests_per_unit: 10, name: read-per-second', 'requests_per_unit: 11, name: read-per-second');
      writeFileSync(join(mounted, 'property-api.yaml'), next);
      expect(await t.service.reload()).toBe('reloaded');
      expect(await info()).toBe(await hashOf(dirWith({ 'property-api.yaml': next })));
    } finally {
      await t.close();
    }
  });
});

describe('problems the config loader used to miss', () => {
  it("replaces naming no limit is a problem with file:line; a name or an unnamed limit's given name is fine", () => {
    const file = (replaced: string): string => `domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1, name: foo}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: c
    rate_limit:
      unit: hour
      requests_per_unit: 1
      replaces: [{name: ${replaced}}]
`;
    expect(problems({ 'r.yaml': file('fo0') })).toEqual([
      'r.yaml:11:25: descriptors[2].rate_limit.replaces[0].name: no limit named "fo0" in this domain: replaces must name a limit (its name: or, if ' +
        'unnamed, <domain>.<rule path>.per_<unit>)',
    ]);
    expect(problems({ 'r.yaml': file('foo') })).toEqual([]);
    expect(problems({ 'r.yaml': file('d.b.per_minute') })).toEqual([]);
  });

  it('a domain defined twice is reported together with the other problems of either file', () => {
    const bad = 'domain: same\ndescriptors:\n  - key: a\n    rate_limit: {unit: secnod, requests_per_unit: 1}\n';
    expect(problems({ 'a.yaml': bad, 'b.yaml': 'domain: same\ndescriptors: []\n' })).toEqual([
      'a.yaml:4:24: descriptors[0].rate_limit.unit: unknown unit "secnod" (use one of second, minute, hour, day, month, year, week)',
      'b.yaml:1:1: domain: domain "same" is already defined in a.yaml (set MERGE_DOMAIN_CONFIG=true to merge them)',
    ]);
    expect(problems({ 'a.yaml': 'domain: same\ndescriptors: []\n', 'b.yaml': 'domain: same\nbogus: 1\ndescriptors: []\n' })).toEqual([
      'b.yaml:2:1: bogus: unknown key (allowed: domain, descriptors, response_headers, tiers, token_key, algorithm)',
      'b.yaml:1:1: domain: domain "same" is already defined in a.yaml (set MERGE_DOMAIN_CONFIG=true to merge them)',
    ]);
  });

  it('a YAML syntax error ends with what is wrong, not the parser\'s "at line L, column C:"', () => {
    const [p] = problems({ 'y.yaml': 'domain: x\ndescriptors:\n  - key: a\n    value: [\n' });
    expect(p).toBe('y.yaml:5:1: Flow sequence in block collection must be sufficiently indented and end with a ]');
  });
});

describe('detailed_metric and value_to_metric: accepted, with a warning that they have no effect', () => {
  const FILE =
    'domain: m\ndescriptors:\n  - key: a\n    detailed_metric: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: b\n    ' +
    'value_to_metric: true\n';
  const NOTE = 'has no effect in Tollgate: metrics are labelled by rule, never by a descriptor value';

  it('check-config: one warning line per use, naming file:line', async () => {
    const dir = dirWith({ 'm.yaml': FILE });
    const run = await runCli(['check-config', dir]);
    expect(run.code).toBe(0);
    expect(run.stderr.trim().split('\n')).toEqual([
      `tollgate: warning: ${join(dir, 'm.yaml')}:4: descriptors[0].detailed_metric: ${NOTE} (accepted for compatibility with envoyproxy/ratelimit)`,
      `tollgate: warning: ${join(dir, 'm.yaml')}:7: descriptors[1].value_to_metric: ${NOTE} (accepted for compatibility with envoyproxy/ratelimit)`,
    ]);
    expect(loadConfigDir(dirWith({ 'p.yaml': PROPERTY })).domains.get('property-api')!.notes).toEqual([]);
  });

  it('serve: one log line at start', async () => {
    const { logger, lines } = capturingLogger('warn');
    const t = await startTestService({ configDir: dirWith({ 'm.yaml': FILE }), logger });
    await t.close();
    const warned = lines().filter((l) => String(l.msg).includes('detailed_metric'));
    expect(warned).toHaveLength(1);
    expect(warned[0]).toMatchObject({ count: 2 });
  });
});
