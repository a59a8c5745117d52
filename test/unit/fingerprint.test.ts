import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { toFingerprint } from '../../src/control/admin-client.js';
import { asFingerprint, cachedFingerprint, fingerprint, MEMO_MAX_CHARS, MEMO_MAX_ENTRIES, memoSize } from '../../src/fingerprint.js';

const sha = (s: string): string => createHash('sha256').update(s).digest('hex');

describe('fingerprints', () => {
  it('hash the token without its Bearer scheme, in any case', () => {
    expect(fingerprint('Bearer abc')).toBe(sha('abc').slice(0, 32));
    expect(fingerprint('bearer   abc')).toBe(fingerprint('abc'));
    expect(cachedFingerprint('Bearer abc')).toBe(fingerprint('abc'));
  });

  it('are recognised as written (32 hex) or in full (64 hex), and nothing else', () => {
    const full = sha('abc');
    expect(asFingerprint(full)).toBe(full.slice(0, 32));
    expect(asFingerprint(full.slice(0, 32).toUpperCase())).toBe(full.slice(0, 32));
    expect(asFingerprint('abc')).toBeUndefined();
    expect(asFingerprint(`${full.slice(0, 31)}z`)).toBeUndefined();
  });

  it('the CLI hashes a token, keeps a fingerprint it is told is one, and refuses to guess between them', () => {
    expect(toFingerprint('Bearer abc')).toBe(fingerprint('abc'));
    expect(toFingerprint(fingerprint('abc'), 'fingerprint')).toBe(fingerprint('abc'));
    // A tenant id of 32 hex characters: a token when told, never taken as a fingerprint unasked.
    const tenant = '0123456789abcdef0123456789abcdef';
    expect(toFingerprint(tenant, 'token')).toBe(fingerprint(tenant));
    expect(() => toFingerprint(tenant)).toThrow(/may be a token or a fingerprint: pass --token .* --fingerprint/);
    expect(() => toFingerprint('abc', 'fingerprint')).toThrow(/--fingerprint takes 32 or 64 hex characters/);
  });

  it('memo stays within its bounds, by entries and by characters, whatever the tokens', () => {
    for (let i = 0; i < 3000; i++) {
      const big = `${i}-${'x'.repeat(8 * 1024)}`;
      expect(cachedFingerprint(big)).toBe(fingerprint(big));
    }
    for (let i = 0; i < 30_000; i++) cachedFingerprint(`${i}-${'y'.repeat(200)}`);
    for (let i = 0; i < 60_000; i++) cachedFingerprint(`t${i}`);
    const { entries, chars } = memoSize();
    expect(entries).toBeLessThanOrEqual(MEMO_MAX_ENTRIES);
    expect(chars).toBeLessThanOrEqual(MEMO_MAX_CHARS);
    expect(entries).toBeGreaterThan(0);
  });
});

describe('fingerprints of values that were not UTF-8', () => {
  it('keep distinct byte strings apart, and apart from every well-formed string', () => {
    // What the request decoder makes of the bytes FF and FE (lone surrogates), and the text U+FFFD that
    // hashing them as UTF-8 would have turned both into.
    const ff = '\uDCFF';
    const fe = '\uDCFE';
    expect(fingerprint(ff)).not.toBe(fingerprint(fe));
    expect(fingerprint(ff)).not.toBe(fingerprint('\uFFFD'));
    expect(fingerprint(`Bearer ${ff}`)).toBe(fingerprint(ff));
  });
});
