import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

/** The formatter wraps code at 160 columns (biome.jsonc) but never breaks a string: this holds strings,
 * comments and everything else to the same width. */
const WIDTH = 160;

function files(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return e.name === 'fixtures' ? [] : files(path);
    return /\.(ts|mjs)$/.test(e.name) ? [path] : [];
  });
}

describe('source lines', () => {
  it(`are at most ${WIDTH} characters, in src/, test/, bench/ and scripts/`, () => {
    const all = ['src', 'test', 'bench', 'scripts'].flatMap(files);
    expect(all.length).toBeGreaterThan(150);
    const long = all.flatMap((f) =>
      readFileSync(f, 'utf8')
        .split('\n')
        .flatMap((line, i) => (line.length > WIDTH ? [`${f}:${i + 1} (${line.length})`] : [])),
    );
    expect(long).toEqual([]);
  });
});
