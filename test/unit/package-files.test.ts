import { existsSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

// What a user of the package expects to find beside the code.
const pkg = JSON.parse(readFileSync('package.json', 'utf8')) as { license: string; version: string };

describe('LICENSE and CHANGELOG.md', () => {
  it('LICENSE is the license package.json names', () => {
    expect(pkg.license).toBe('Apache-2.0');
    const text = readFileSync('LICENSE', 'utf8');
    expect(text).toMatch(/^\s+Apache License\n\s+Version 2\.0, January 2004\n/);
    expect(text).toContain('TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION');
    expect(text).toContain('END OF TERMS AND CONDITIONS');
  });

  it('CHANGELOG.md has an entry for the version in package.json', () => {
    expect(existsSync('CHANGELOG.md')).toBe(true);
    expect(readFileSync('CHANGELOG.md', 'utf8')).toContain(`## [${pkg.version}]`);
  });
});
