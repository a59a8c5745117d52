import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, symlinkSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, type ConfigProblem } from '../../src/config/errors.js';
import {
  ConfigAssembler,
  type ConfigSource,
  compileSources,
  compileSpecs,
  configLimits,
  DEFAULT_MAX_CONFIG_BYTES,
  hashSources,
  loadConfigDir,
  readConfigSources,
  sliceSpecs,
  validateSources,
} from '../../src/config/load.js';
import { matchRule } from '../../src/config/match.js';
import { parseServeArgs, SettingsError } from '../../src/settings/settings.js';

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
    // envoyproxy/ratelimit's newer keys, refused where it refuses them (its test/config/*.yaml in brackets).
    ['share-threshold-without-wildcard.yaml', 5, 'descriptors[0].share_threshold', /only be used with a wildcard value/],
    ['metadata-not-a-mapping.yaml', 4, 'descriptors[0].metadata', /must be a mapping/],
    ['too-many-wildcards.yaml', 4, 'descriptors[0].value', /33 wildcards "\*": at most 32/],
    ['replaces-itself.yaml', 10, 'descriptors[0].descriptors[0].rate_limit.replaces[0].name', /cannot replace itself/], // [replaces_self]
    ['replaces-empty-name.yaml', 10, 'descriptors[0].descriptors[0].rate_limit.replaces[0].name', /must be a string/], // [replaces_empty]
    ['descriptor-without-key.yaml', 3, 'descriptors[0].key', /is required/], // [empty_key]
    ['descriptor-not-a-mapping.yaml', 3, 'descriptors[0]', /must be a mapping/], // [non_map_list]
    ['domain-key-not-a-string.yaml', 1, '0.25', /unknown key/], // [non_string_key]
    ['misspelled-requests-per-unit.yaml', 7, 'descriptors[0].rate_limit.requestsperunit', /unknown key/], // [misspelled_key2]
    ['rate-limit-and-rate-limits.yaml', 6, 'descriptors[0].rate_limits', /not both/],
    ['bad-algorithm.yaml', 4, 'descriptors[0].algorithm', /fixed_window, sliding_window, token_bucket/],
    ['burst-below-one.yaml', 5, 'descriptors[0].rate_limit.burst', /must be at least 1/],
    ['burst-without-token-bucket.yaml', 7, 'descriptors[0].rate_limits[1].burst', /only a token_bucket limit has a burst \(this limit is fixed_window\)/],
    ['unlimited-with-unit.yaml', 6, 'descriptors[0].rate_limit.unit', /unlimited/],
    ['yaml-syntax-error.yaml', 5, '', /./],
    ['bad-header-name.yaml', 3, 'response_headers.limit', /not a valid HTTP header name/],
    ['rule-path-collision.yaml', 7, 'descriptors[1]', /rule path "a.b" is also the path of the descriptor at line 5/],
    ['calendar-on-sliding-window.yaml', 7, 'descriptors[0].rate_limits[0].calendar', /only a fixed_window limit has calendar windows/],
    ['reservation-key-without-charge-mode.yaml', 4, 'descriptors[0].reservation_key', /only a charge_mode descriptor has reservations/],
    ['in-flight-with-rate-limit.yaml', 5, 'descriptors[0].rate_limit', /an in_flight descriptor counts requests at once: it has no rate_limit/],
    ['in-flight-limit-zero.yaml', 5, 'descriptors[0].in_flight.limit', /from 1 to 100000/],
    ['in-flight-request-key-is-rule-key.yaml', 6, 'descriptors[0].in_flight.request_key', /"tenant" is a key of this rule's own descriptors/],
    ['in-flight-request-key-is-parent-key.yaml', 8, 'descriptors[0].descriptors[0].in_flight.request_key', /"route" is a key of this rule's own descriptors/],
    ['refunds-off-on-in-flight.yaml', 4, 'descriptors[0].refunds', /slots come back by give-backs/],
    ['in-flight-tier-limits-as-windows.yaml', 10, 'descriptors[0].tier_limits.pro', /an in_flight rule's tier is \{limit: N\}/],
    ['in-flight-lease-too-long.yaml', 6, 'descriptors[0].in_flight.lease', /from 1s to 24h/],
    ['in-flight-max-hold-not-past-lease.yaml', 7, 'descriptors[0].in_flight.max_hold', /longer than the lease/],
    ['in-flight-max-hold-without-request-key.yaml', 7, 'descriptors[0].in_flight.max_hold', /needs request_key/],
    ['in-flight-max-hold-lease-too-short.yaml', 7, 'descriptors[0].in_flight.max_hold', /needs a lease of 3s or more/],
    ['in-flight-unknown-key.yaml', 6, 'descriptors[0].in_flight.leas', /unknown key/],
    ['unit-multiplier-zero.yaml', 4, 'descriptors[0].rate_limit.unit_multiplier', /must be at least 1/],
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

  it('a bad burst points at file:line:column', () => {
    expect(() => loadConfigDir(join(FIXTURES, 'burst-below-one.yaml'))).toThrow(
      `${join(FIXTURES, 'burst-below-one.yaml')}:5:62: descriptors[0].rate_limit.burst: must be at least 1`,
    );
    expect(() => loadConfigDir(join(FIXTURES, 'burst-without-token-bucket.yaml'))).toThrow(
      `${join(FIXTURES, 'burst-without-token-bucket.yaml')}:7:79: descriptors[0].rate_limits[1].burst: only a token_bucket limit has a burst`,
    );
  });

  it("token_bucket: a limit's own algorithm wins over its rule's, burst defaults to requests_per_unit", () => {
    const text = [
      'domain: x',
      'descriptors:',
      '  - key: a',
      '    algorithm: token_bucket',
      '    rate_limits:',
      '      - {unit: second, requests_per_unit: 10, burst: 20}',
      '      - {unit: minute, requests_per_unit: 100}',
      '      - {unit: hour, requests_per_unit: 1000, algorithm: fixed_window}',
      '  - key: b',
      '    rate_limit: {unit: second, requests_per_unit: 5, algorithm: token_bucket}',
      '',
    ].join('\n');
    const rules = compileSources([{ file: 'tb.yaml', text }]).domains.get('x')!.rules;
    expect(rules[0]!.limits.map((l) => [l.algorithm, l.burst])).toEqual([
      ['token_bucket', 20],
      ['token_bucket', 100],
      ['fixed_window', 0],
    ]);
    expect(rules[1]!.limits.map((l) => [l.algorithm, l.burst])).toEqual([['token_bucket', 5]]);
    expect(rules[1]!.algorithm).toBe('fixed_window');
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
    matchRule(
      domain,
      entries.map(([key, value]) => ({ key, value })),
    )?.limits.map((l) => `${l.requestsPerUnit}/${l.unit}`);

  it('has the property API limits per token and category', () => {
    expect(
      limitsOf([
        ['category', 'read'],
        ['token', 'Bearer a'],
      ]),
    ).toEqual(['10/second', '1000/hour']);
    expect(
      limitsOf([
        ['category', 'reports'],
        ['token', 'Bearer a'],
      ]),
    ).toEqual(['2/second', '200/hour']);
    expect(
      limitsOf([
        ['category', 'write'],
        ['token', 'Bearer a'],
      ]),
    ).toEqual(['5/second', '500/hour']);
  });

  it('has the multi-property-group tier: read 30/s, write 15/s, hourly unchanged', () => {
    const tier = (category: string): string[] | undefined =>
      matchRule(domain, [
        { key: 'category', value: category },
        { key: 'token', value: 't' },
      ])
        ?.tierLimits.get('multi-property-group')
        ?.map((l) => `${l.requestsPerUnit}/${l.unit}`);
    expect(tier('read')).toEqual(['30/second', '1000/hour']);
    expect(tier('write')).toEqual(['15/second', '500/hour']);
    expect(tier('reports')).toBeUndefined();
  });

  it('limits requests without a token with a separate rule', () => {
    expect(matchRule(domain, [{ key: 'category', value: 'read' }])?.id).toBe('category_read');
    expect(
      matchRule(domain, [
        { key: 'category', value: 'read' },
        { key: 'token', value: 'x' },
      ])?.id,
    ).toBe('category_read.token');
  });
});

describe('compiling in slices (hot reload) gives the config compiling at once gives', () => {
  const NESTED = `
domain: nested
tiers: {gold: {}}
descriptors:
  - key: tenant
    value: acme*
    rate_limit: {unit: minute, requests_per_unit: 100}
    descriptors:
      - key: user
        rate_limits: [{unit: second, requests_per_unit: 2}, {unit: hour, requests_per_unit: 50}]
        tier_limits: {gold: [{unit: second, requests_per_unit: 20}]}
      - {key: path, value: /a*, rate_limit: {unit: second, requests_per_unit: 1}}
      - {key: path, value: /ab*, rate_limit: {unit: second, requests_per_unit: 2}}
      - {key: path, value: /abc, rate_limit: {unit: second, requests_per_unit: 3}}
  - key: tenant
    value: a*
    descriptors:
      - {key: user, value: root, rate_limit: {unlimited: true}}
      - {key: user, shadow_mode: true, algorithm: sliding_window, rate_limit: {unit: day, requests_per_unit: 9}}
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 7}
  - key: region
    value: eu
    descriptors:
      - key: tenant
        descriptors:
          - {key: user, value: u*, rate_limit: {unit: minute, requests_per_unit: 4}}
          - {key: user, value: us*, rate_limit: {unit: minute, requests_per_unit: 5}}
`;
  const sources: ConfigSource[] = [
    { file: 'config/property-api.yaml', text: readFileSync('config/property-api.yaml', 'utf8') },
    { file: 'nested.yaml', text: NESTED },
    { file: 'empty-domain.yaml', text: 'domain: nothing\ndescriptors: []\n' },
  ];
  const specs = validateSources(sources);
  const whole = compileSpecs(specs, hashSources(sources));

  it.each([1, 2, 3, 5, 1000])('slices of weight %i', (weight) => {
    const slices = sliceSpecs(specs, weight);
    if (weight === 1) expect(slices.length).toBe(23); // one per descriptor
    const assembler = new ConfigAssembler();
    const rules = slices.flatMap((s) => [...assembler.add(structuredClone(s))]);
    const sliced = assembler.finish(whole.hash);
    expect(sliced).toEqual(whole);
    // Each rule is compiled in exactly one slice.
    expect(rules.map((r) => `${r.domain}/${r.id}`)).toEqual([...whole.domains.values()].flatMap((d) => d.rules.map((r) => `${d.name}/${r.id}`)));
    const nested = sliced.domains.get('nested')!;
    const match = (...e: [string, string][]): string | undefined =>
      matchRule(
        nested,
        e.map(([key, value]) => ({ key, value })),
      )?.id;
    expect(match(['tenant', 'acme-1'], ['path', '/abc'])).toBe('tenant_acme*.path_/abc');
    // The first wildcard in file order wins (envoyproxy/ratelimit's GetLimit), in whichever slice it was compiled.
    expect(match(['tenant', 'acme-1'], ['path', '/abd'])).toBe('tenant_acme*.path_/a*');
    expect(match(['region', 'eu'], ['tenant', 'x'], ['user', 'usa'])).toBe('region_eu.tenant.user_u*');
  });
});

describe('reading a config directory: only regular files, within the bounds, checked before reading', () => {
  const dirWith = (files: Record<string, string> = {}): string => {
    const dir = mkdtempSync(join(tmpdir(), 'tollgate-read-'));
    for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
    return dir;
  };
  const GOOD = 'domain: good\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n';
  const problems = (dir: string, limits = configLimits()): ConfigProblem[] => {
    try {
      readConfigSources(dir, limits);
    } catch (err) {
      if (err instanceof ConfigError) return err.problems;
      throw err;
    }
    throw new Error('read without error');
  };

  it('bounds a file by its size before reading it: a sparse 64 MB file costs nothing', () => {
    const dir = dirWith({ 'good.yaml': GOOD });
    writeFileSync(join(dir, 'huge.yaml'), '');
    truncateSync(join(dir, 'huge.yaml'), 64 * 1024 * 1024);
    expect(problems(dir)).toEqual([
      {
        file: join(dir, 'huge.yaml'),
        line: 0,
        column: 0,
        key: '',
        code: 'TOO_LARGE',
        message: `67108864 bytes (64.0 MiB), more than the maximum of ${DEFAULT_MAX_CONFIG_BYTES} bytes (4.0 MiB) per file (--max-config-bytes)`,
      },
    ]);
    expect(DEFAULT_MAX_CONFIG_BYTES).toBe(4 * 1024 * 1024);
  });

  it('bounds the directory at 4 times the file bound', () => {
    const dir = dirWith(Object.fromEntries([0, 1, 2, 3, 4].map((i) => [`f${i}.yaml`, 'x'.repeat(900)])));
    expect(problems(dir, configLimits(1000))).toEqual([
      expect.objectContaining({
        file: dir,
        code: 'TOO_LARGE',
        message: expect.stringContaining('add up to 4500 bytes, more than the maximum of 4000 bytes per directory'),
      }),
    ]);
    expect(readConfigSources(dir, configLimits(1200))).toHaveLength(5);
  });

  it('never opens a FIFO (that would block until a writer came), a directory or a device', () => {
    const dir = dirWith({ 'good.yaml': GOOD });
    execFileSync('mkfifo', [join(dir, 'fifo.yaml')]);
    mkdirSync(join(dir, 'dir.yaml'));
    symlinkSync('/dev/zero', join(dir, 'zero.yaml'));
    expect(problems(dir).map((p) => [p.file, p.code, p.message.replace(/;.*/, '')])).toEqual([
      [join(dir, 'dir.yaml'), 'NOT_A_FILE', 'not a regular file (a directory)'],
      [join(dir, 'fifo.yaml'), 'NOT_A_FILE', 'not a regular file (a FIFO)'],
      [join(dir, 'zero.yaml'), 'NOT_A_FILE', 'not a regular file (a device)'],
    ]);
  });

  it('names a symlink loop and a missing directory with their error codes', () => {
    const dir = dirWith({ 'good.yaml': GOOD });
    symlinkSync('loop.yaml', join(dir, 'loop.yaml'));
    expect(problems(dir)).toEqual([
      expect.objectContaining({ file: join(dir, 'loop.yaml'), code: 'ELOOP', message: expect.stringMatching(/^cannot read \(ELOOP: /) }),
    ]);
    expect(problems(join(dir, 'gone'))).toEqual([
      expect.objectContaining({ code: 'ENOENT', message: expect.stringMatching(/^cannot read the config directory \(ENOENT: /) }),
    ]);
    expect(() => loadConfigDir(join(dir, 'gone'))).toThrow(`${join(dir, 'gone')}: cannot read the config directory (ENOENT: no such file or directory)`);
  });

  it('skips a dangling link, as a ConfigMap leaves one for a moment when a key is removed', () => {
    const dir = dirWith({ 'good.yaml': GOOD });
    symlinkSync('..data/removed.yaml', join(dir, 'removed.yaml'));
    expect(readConfigSources(dir).map((s) => s.file)).toEqual([join(dir, 'good.yaml')]);
  });

  it.skipIf(!existsSync('/proc/self/status'))('reads no more than stat admitted: a file whose content does not match its size is not loaded', () => {
    // procfs files say they are empty and are not: a stand-in for a file that grows while it is read.
    const dir = dirWith({ 'good.yaml': GOOD });
    symlinkSync('/proc/self/status', join(dir, 'status.yaml'));
    expect(problems(dir)).toEqual([expect.objectContaining({ file: join(dir, 'status.yaml'), code: 'CHANGED', message: 'changed while being read' })]);
  });

  it('an empty directory loads as no domains (serve and check-config warn and go on)', () => {
    expect(loadConfigDir(dirWith()).domains.size).toBe(0);
  });

  it('--max-config-bytes and MAX_CONFIG_BYTES set the bound; 4 MiB by default', () => {
    expect(parseServeArgs([], {}).maxConfigBytes).toBe(4 * 1024 * 1024);
    expect(parseServeArgs([], { MAX_CONFIG_BYTES: '1000' }).maxConfigBytes).toBe(1000);
    expect(parseServeArgs(['--max-config-bytes', '2000'], { MAX_CONFIG_BYTES: '1000' }).maxConfigBytes).toBe(2000);
    expect(() => parseServeArgs(['--max-config-bytes', '0'], {})).toThrow(SettingsError);
  });
});
