import { describe, expect, it } from 'vitest';
import { asciiString } from '../../src/rls/ascii-strings.js';

describe('decoded ASCII strings kept by their bytes', () => {
  it('always gives the string of the bytes, for strings that share a slot (same length, same first, middle and last byte)', () => {
    // 'aXbYc'-shaped strings: one slot, told apart only by bytes the slot does not look at.
    const strings: string[] = [];
    for (let i = 0; i < 2000; i++) {
      const inner = (i * 7919).toString(36).padStart(6, '0').slice(-6);
      strings.push(`t${inner.slice(0, 3)}m${inner.slice(3)}z`);
    }
    const decode = (s: string): string => asciiString(Buffer.from(`..${s}..`, 'latin1'), 2, 2 + s.length);
    for (let round = 0; round < 3; round++) for (const s of strings) expect(decode(s)).toBe(s);
    // Right after a string, the same one with any single byte changed: every byte is compared.
    for (const s of strings.slice(0, 50)) {
      for (let p = 0; p < s.length; p++) {
        const other = `${s.slice(0, p)}${s[p] === '#' ? '$' : '#'}${s.slice(p + 1)}`;
        expect(decode(s)).toBe(s);
        expect(decode(other)).toBe(other);
      }
    }
  });

  it('gives the string again for the same bytes at another offset, and strings past the kept length and empty ones as they are', () => {
    expect(asciiString(Buffer.from('domain-bench'), 0, 12)).toBe('domain-bench');
    expect(asciiString(Buffer.from('xdomain-bench'), 1, 13)).toBe('domain-bench');
    const long = 'k'.repeat(65);
    expect(asciiString(Buffer.from(long), 0, 65)).toBe(long);
    expect(asciiString(Buffer.from('abc'), 1, 1)).toBe('');
  });
});
