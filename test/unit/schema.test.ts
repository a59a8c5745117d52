import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { loadConfigDir } from '../../src/config/load.js';
import { DESCRIPTOR_KEYS, DOMAIN_KEYS, HEADER_KEYS, RATE_LIMIT_KEYS, TIER_LIMIT_KEYS } from '../../src/config/validate.js';

// The JSON Schema that editors use while typing, held to the loader that is the authority.
// biome-ignore lint/suspicious/noExplicitAny: the schema document, walked by path; a wrong path fails the test
const schema = JSON.parse(readFileSync('schema/descriptor-config.schema.json', 'utf8')) as Record<string, any>;
const ajv = new Ajv2020({ allErrors: true, strict: true, strictRequired: false }); // required inside not: is the point;
const validate = ajv.compile(schema);

const yamlFiles = (dir: string): string[] =>
  readdirSync(dir)
    .filter((f) => /\.ya?ml$/.test(f) && statSync(join(dir, f)).isFile())
    .map((f) => join(dir, f));

/** Bad fixtures whose problem a schema cannot state: across entries, across files, or in the YAML text. */
const BEYOND_A_SCHEMA: Record<string, string> = {
  'duplicate-descriptor.yaml': 'two list items with the same key and value',
  'duplicate-window.yaml': 'two list items with the same unit',
  'duplicate-limit-name.yaml': 'names unique across the whole domain',
  'unknown-tier.yaml': 'a reference to the tiers: declared elsewhere in the file',
  'duplicate-yaml-key.yaml': 'YAML text: a mapping with a key twice',
  'yaml-syntax-error.yaml': 'YAML text that does not parse',
  'burst-without-token-bucket.yaml': "a limit's algorithm inherited from its descriptor or the domain",
  'rule-path-collision.yaml': 'two descriptors at different levels whose joined keys and values spell one path',
  'replaces-itself.yaml': "a replaces entry equal to its own limit's name",
  'calendar-on-sliding-window.yaml': "a limit's algorithm inherited from its descriptor",
  'in-flight-request-key-is-rule-key.yaml': "a value equal to the descriptor's own key",
  'in-flight-request-key-is-parent-key.yaml': 'a value equal to the key of a descriptor above',
  'in-flight-max-hold-not-past-lease.yaml': 'a duration compared with another (max_hold past the lease)',
  'in-flight-max-hold-lease-too-short.yaml': "a duration's bound that depends on another key (a renewed lease of 3s or more)",
};

describe('schema/descriptor-config.schema.json (JSON Schema 2020-12)', () => {
  it('is a valid 2020-12 schema, and knows exactly the keys the loader knows', () => {
    expect(schema.$schema).toBe('https://json-schema.org/draft/2020-12/schema');
    expect(Object.keys(schema.properties).sort()).toEqual([...DOMAIN_KEYS].sort());
    expect(Object.keys(schema.$defs.descriptor.properties).sort()).toEqual([...DESCRIPTOR_KEYS].sort());
    expect(Object.keys(schema.$defs.rateLimit.properties).sort()).toEqual([...RATE_LIMIT_KEYS].sort());
    expect(Object.keys(schema.$defs.tierLimit.properties).sort()).toEqual([...TIER_LIMIT_KEYS].sort());
    expect(Object.keys(schema.$defs.responseHeaders.anyOf[1].properties).sort()).toEqual([...HEADER_KEYS].sort());
  });

  const good = [
    ...yamlFiles('config'),
    ...yamlFiles('examples'),
    ...yamlFiles('test/fixtures/config-good'),
    ...yamlFiles('test/fixtures/config/duplicate-domain'),
    ...yamlFiles('deploy/kubernetes').filter((f) => f.endsWith('property-api.yaml')),
  ];
  it.each(good)('accepts %s, which the loader accepts too', (file) => {
    expect(() => loadConfigDir(file)).not.toThrow();
    const ok = validate(parse(readFileSync(file, 'utf8')));
    expect(validate.errors ?? []).toEqual([]);
    expect(ok).toBe(true);
  });

  const bad = yamlFiles('test/fixtures/config').map((f) => [f.split('/').pop()!, f]);
  it.each(bad)('rejects %s, which the loader rejects, unless a schema cannot say why', (name, file) => {
    expect(() => loadConfigDir(file)).toThrow();
    const beyond = BEYOND_A_SCHEMA[name];
    let doc: unknown;
    try {
      doc = parse(readFileSync(file, 'utf8'));
    } catch {
      expect(beyond).toMatch(/^YAML text/);
      return;
    }
    expect(validate(doc)).toBe(beyond !== undefined);
  });

  it('every fixture listed as beyond a schema exists', () => {
    for (const name of Object.keys(BEYOND_A_SCHEMA)) expect(statSync(join('test/fixtures/config', name)).isFile()).toBe(true);
  });

  it('ships in the package, and the examples point editors at it', () => {
    const pkg = JSON.parse(readFileSync('package.json', 'utf8')) as { files: string[] };
    expect(pkg.files).toContain('schema');
    for (const f of yamlFiles('examples'))
      expect(readFileSync(f, 'utf8')).toMatch(/^# yaml-language-server: \$schema=\.\.\/schema\/descriptor-config\.schema\.json$/m);
  });
});
