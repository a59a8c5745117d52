import { createHash } from 'node:crypto';

/** Hex characters kept of the SHA-256: 128 bits, short enough to type and far from colliding. */
export const FINGERPRINT_LENGTH = 32;

const BEARER = /^bearer\s+/i;

/** Identifies a token without revealing it: SHA-256 hex of the token with any `Bearer ` scheme stripped,
 * so `Bearer abc` and `abc` share counters and tiers. */
export function fingerprint(token: string): string {
  return createHash('sha256').update(token.replace(BEARER, '')).digest('hex').slice(0, FINGERPRINT_LENGTH);
}

const CACHE_MAX = 50_000;
const cache = new Map<string, string>();

/** fingerprint() with a bounded memo: the same tokens arrive over and over, and hashing dominates
 * otherwise. Cleared whole when full, which is cheaper than tracking recency. */
export function cachedFingerprint(token: string): string {
  let fp = cache.get(token);
  if (fp === undefined) {
    if (cache.size >= CACHE_MAX) cache.clear();
    fp = fingerprint(token);
    cache.set(token, fp);
  }
  return fp;
}

/** A fingerprint as Tollgate writes it (32 hex characters) from one given in full (64) or as written;
 * undefined when `text` is neither. */
export function asFingerprint(text: string): string | undefined {
  const lower = text.toLowerCase();
  if (/^[0-9a-f]{64}$/.test(lower)) return lower.slice(0, FINGERPRINT_LENGTH);
  return lower.length === FINGERPRINT_LENGTH && /^[0-9a-f]+$/.test(lower) ? lower : undefined;
}
