import { createHash } from 'node:crypto';

/** Hex characters kept of the SHA-256: 128 bits, short enough to type and far from colliding. */
export const FINGERPRINT_LENGTH = 32;

const BEARER = /^bearer\s+/i;

/** A byte no UTF-8 text contains: it separates the hashes of the two kinds of string below. */
const ILL_FORMED = Buffer.from([0xff]);

/** Identifies a token without revealing it: SHA-256 hex of the token with any `Bearer ` scheme stripped,
 * so `Bearer abc` and `abc` share counters and tiers. A string with lone surrogates (the request decoder's
 * form of bytes that are not UTF-8, see rls/rls-codec.ts) is hashed as 0xFF and its UTF-16: hashing it as UTF-8
 * would turn every lone surrogate into U+FFFD and let distinct byte strings share one counter. */
export function fingerprint(token: string): string {
  const bare = token.replace(BEARER, '');
  const hash = createHash('sha256');
  if (bare.isWellFormed()) hash.update(bare);
  else hash.update(ILL_FORMED).update(bare, 'utf16le');
  return hash.digest('hex').slice(0, FINGERPRINT_LENGTH);
}

/** The memo's bounds: entries, and characters of the tokens it holds (a token is at most 2 bytes a character
 * in V8), so 8 KB tokens from a hostile client cannot make it hold 400 MB. Longer tokens are hashed each time
 * (about a microsecond per kilobyte) and never kept. */
export const MEMO_MAX_ENTRIES = 50_000;
export const MEMO_MAX_CHARS = 2_000_000;
const MEMO_MAX_TOKEN_CHARS = 256;

const cache = new Map<string, string>();
let cachedChars = 0;

/** fingerprint() with a bounded memo: the same tokens arrive over and over, and hashing dominates
 * otherwise. Cleared whole when full, which is cheaper than tracking recency. */
export function cachedFingerprint(token: string): string {
  if (token.length > MEMO_MAX_TOKEN_CHARS) return fingerprint(token);
  let fp = cache.get(token);
  if (fp === undefined) {
    if (cache.size >= MEMO_MAX_ENTRIES || cachedChars + token.length > MEMO_MAX_CHARS) {
      cache.clear();
      cachedChars = 0;
    }
    fp = fingerprint(token);
    cache.set(token, fp);
    cachedChars += token.length;
  }
  return fp;
}

/** What the memo holds now, for tests and the memory bound in docs/operations.md. */
export function memoSize(): { entries: number; chars: number } {
  return { entries: cache.size, chars: cachedChars };
}

/** A fingerprint as Tollgate writes it (32 hex characters) from one given in full (64) or as written;
 * undefined when `text` is neither. */
export function asFingerprint(text: string): string | undefined {
  const lower = text.toLowerCase();
  if (/^[0-9a-f]{64}$/.test(lower)) return lower.slice(0, FINGERPRINT_LENGTH);
  return lower.length === FINGERPRINT_LENGTH && /^[0-9a-f]+$/.test(lower) ? lower : undefined;
}
