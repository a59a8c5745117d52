import { describe, expect, it } from 'vitest';
import { compileGlob, globMatch, MAX_WILDCARDS } from '../../src/config/glob.js';

/** The meaning, stated the slow way: dynamic programming over (pattern position, value position), `*`
 * taking any run of characters, everything else itself. */
function reference(pattern: string, value: string): boolean {
  let row = new Array<boolean>(value.length + 1).fill(false);
  row[0] = true;
  for (const c of pattern) {
    const next = new Array<boolean>(value.length + 1).fill(false);
    for (let j = 0; j <= value.length; j++) {
      if (c === '*') next[j] = row[j]! || (j > 0 && next[j - 1]!);
      else next[j] = j > 0 && row[j - 1]! && value[j - 1] === c;
    }
    row = next;
  }
  return row[value.length]!;
}

/** A small deterministic generator, so a failure can be replayed. */
function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

describe('wildcard values (envoyproxy/ratelimit README Example 9)', () => {
  it.each([
    ['value*', 'value1', true],
    ['value*', 'value', true],
    ['value*', 'valu', false],
    ['/api/*/action', '/api/123/action', true],
    ['/api/*/action', '/api/123/other', false],
    ['/api/*/resource/*/action', '/api/v1/resource/123/action', true],
    ['foo*bar*baz', 'foobarbaz', true],
    ['foo*bar*baz', 'foobazbar', false],
    ['bar*b', 'bar', false], // prefix and suffix may not overlap
    ['a*a', 'a', false],
    ['a*a', 'aa', true],
    ['*', '', true],
    ['**', 'anything', true],
    ['exact', 'exact', true],
  ])('%s ~ %s → %s', (pattern, value, expected) => {
    expect(globMatch(compileGlob(pattern), value)).toBe(expected);
  });

  it('agrees with the dynamic-programming reading on 20,000 random patterns and values', () => {
    const next = rng(29);
    const pick = (alphabet: string, max: number): string =>
      Array.from({ length: Math.floor(next() * max) }, () => alphabet[Math.floor(next() * alphabet.length)]).join('');
    let matched = 0;
    for (let i = 0; i < 20_000; i++) {
      // Long parts too, so the KMP search (parts over 16 characters) is held to the same meaning.
      const pattern = pick(i % 2 ? 'ab*' : 'aab*', i % 3 ? 8 : 60);
      const value = pick('ab', i % 3 ? 10 : 80);
      const got = globMatch(compileGlob(pattern), value);
      expect(got, `${JSON.stringify(pattern)} ~ ${JSON.stringify(value)}`).toBe(reference(pattern, value));
      if (got) matched++;
    }
    expect(matched).toBeGreaterThan(1000); // both answers were exercised
  });

  it('a 64 KiB value against 100 hostile patterns of 32 wildcards stays linear (no backtracking)', () => {
    // Parts that almost match everywhere: a backtracking matcher (or a regular expression) tries each
    // alignment of each part again for every way the parts before could have matched.
    const value = `${'a'.repeat(64 * 1024)}b`;
    const patterns = Array.from({ length: 100 }, (_, i) =>
      compileGlob(`a*${Array.from({ length: MAX_WILDCARDS - 1 }, (_, j) => `${'a'.repeat(8 + ((i + j) % 24))}c`).join('*')}*b`),
    );
    const start = performance.now();
    let matches = 0;
    for (const g of patterns) if (globMatch(g, value)) matches++;
    const ms = performance.now() - start;
    expect(matches).toBe(0);
    // The work is ~100 patterns × 64 Ki characters read a few times each: milliseconds. The bound is wide
    // for a loaded machine; the quadratic alternative (64 Ki × 64 Ki per part) takes minutes.
    expect(ms).toBeLessThan(2000);
  });
});
