import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, type ConfigProblem } from '../../src/config/errors.js';
import { compileSources, loadConfigDir } from '../../src/config/load.js';
import { matchRule } from '../../src/config/match.js';

const FIXTURES = 'test/fixtures/config';

function problemsOf(name: string): ConfigProblem[] {
  const file = join(FIXTURES, name);
  try {
    compileSources([{ file, text: readFileSync(file, 'utf8') }]);
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
  throw new Error(`${name} loaded without error`);
}

describe('descriptor config errors name the file, the line and the key', () => {
  it.each([
    ['unknown-key.yaml', 6, 'descriptors[0].rate_limt_typo', /unknown key/],
    ['bad-unit.yaml', 5, 'descriptors[0].rate_limit.unit', /unknown unit "fortnight"/],
    ['negative-requests-per-unit.yaml', 6, 'descriptors[0].rate_limits[0].requests_per_unit', /must not be negative/],
    ['fractional-requests-per-unit.yaml', 4, 'descriptors[0].rate_limit.requests_per_unit', /whole number/],
    ['duplicate-descriptor.yaml', 6, 'descriptors[1]', /duplicate descriptor category=read/],
    ['duplicate-window.yaml', 7, 'descriptors[0].rate_limits[2].unit', /duplicate window/],
    ['duplicate-limit-name.yaml', 6, 'descriptors[1].rate_limit.name', /duplicate limit name "shared"/],
    ['duplicate-yaml-key.yaml', 5, '', /unique/i],
    ['unknown-tier.yaml', 8, 'descriptors[0].tier_limits.platinum', /unknown tier "platinum"/],
    ['missing-domain.yaml', 1, 'domain', /is required/],
    ['missing-requests-per-unit.yaml', 5, 'descriptors[0].rate_limit.requests_per_unit', /is required/],
    ['wildcard-not-at-end.yaml', 4, 'descriptors[0].value', /wildcard/],
    ['rate-limit-and-rate-limits.yaml', 6, 'descriptors[0].rate_limits', /not both/],
    ['bad-algorithm.yaml', 4, 'descriptors[0].algorithm', /fixed_window, sliding_window/],
    ['unlimited-with-unit.yaml', 6, 'descriptors[0].rate_limit.unit', /unlimited/],
    ['yaml-syntax-error.yaml', 5, '', /./],
    ['bad-header-name.yaml', 3, 'response_headers.limit', /not a valid HTTP header name/],
  ])('%s → line %i, key %s', (name, line, key, message) => {
    const [first] = problemsOf(name);
    expect(first).toBeDefined();
    expect(first!.file).toBe(join(FIXTURES, name));
    expect(first!.line).toBe(line);
    expect(first!.key).toBe(key);
    expect(first!.message).toMatch(message);
  });

  it('a domain defined in two files points at the second', () => {
    expect(() => loadConfigDir(join(FIXTURES, 'duplicate-domain'))).toThrow(
      `${join(FIXTURES, 'duplicate-domain', 'b.yaml')}:2:1: domain: domain "same" is already defined in ${join(FIXTURES, 'duplicate-domain', 'a.yaml')}`,
    );
  });

  it('reports every problem of a file, not just the first', () => {
    const text = 'domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unit: eon, requests_per_unit: -1}\n    bogus: 1\n';
    try {
      compileSources([{ file: 'many.yaml', text }]);
      expect.unreachable();
    } catch (err) {
      expect((err as ConfigError).problems.map((p) => p.key)).toEqual([
        'descriptors[0].bogus',
        'descriptors[0].rate_limit.unit',
        'descriptors[0].rate_limit.requests_per_unit',
      ]);
    }
  });
});

describe('the bundled config', () => {
  const config = loadConfigDir('config');
  const domain = config.domains.get('property-api')!;
  const limitsOf = (entries: [string, string][]): string[] | undefined =>
    matchRule(domain, entries.map(([key, value]) => ({ key, value })))?.limits.map((l) => `${l.requestsPerUnit}/${l.unit}`);

  it('has the property API limits per token and category', () => {
    expect(limitsOf([['category', 'read'], ['token', 'Bearer a']])).toEqual(['10/second', '1000/hour']);
    expect(limitsOf([['category', 'reports'], ['token', 'Bearer a']])).toEqual(['2/second', '200/hour']);
    expect(limitsOf([['category', 'write'], ['token', 'Bearer a']])).toEqual(['5/second', '500/hour']);
  });

  it('has the multi-property-group tier: read 30/s, write 15/s, hourly unchanged', () => {
    const tier = (category: string): string[] | undefined =>
      matchRule(domain, [{ key: 'category', value: category }, { key: 'token', value: 't' }])
        ?.tierLimits.get('multi-property-group')
        ?.map((l) => `${l.requestsPerUnit}/${l.unit}`);
    expect(tier('read')).toEqual(['30/second', '1000/hour']);
    expect(tier('write')).toEqual(['15/second', '500/hour']);
    expect(tier('reports')).toBeUndefined();
  });

  it('limits requests without a token with a separate rule', () => {
    expect(matchRule(domain, [{ key: 'category', value: 'read' }])?.id).toBe('category_read');
    expect(matchRule(domain, [{ key: 'category', value: 'read' }, { key: 'token', value: 'x' }])?.id).toBe('category_read.token');
  });
});
