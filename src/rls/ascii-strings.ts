/** Short ASCII strings decoded before, kept with their bytes. The domain, the descriptor keys and a sidecar's
 * few values come again in every request: each is made once and hashed once (V8 keeps a string's hash, which the
 * config's and the fingerprint cache's Map lookups then reuse), instead of a new string per request to hash again.
 * Direct-mapped: a string takes the slot its length and three of its bytes choose, replacing what was there, so a
 * client sending endless new values costs one byte comparison and one copy each, and the table stays bounded
 * (SLOTS × MAX_BYTES bytes and SLOTS strings). */

const SLOTS = 256;
const MAX_BYTES = 64;
const kept = Buffer.alloc(SLOTS * MAX_BYTES);
const lengths = new Int32Array(SLOTS).fill(-1);
const strings = new Array<string>(SLOTS).fill('');

/** `buf.toString('latin1', start, end)` for bytes the caller found all below 0x80 (where latin1 is ASCII). */
export function asciiString(buf: Buffer, start: number, end: number): string {
  const len = end - start;
  if (len === 0) return '';
  if (len > MAX_BYTES) return buf.toString('latin1', start, end);
  const slot = (len * 31 + buf[start]! * 7 + buf[end - 1]! * 3 + buf[start + (len >> 1)]!) & (SLOTS - 1);
  const at = slot * MAX_BYTES;
  if (lengths[slot] === len) {
    let i = 0;
    while (i < len && kept[at + i] === buf[start + i]) i++;
    if (i === len) return strings[slot]!;
  }
  const s = buf.toString('latin1', start, end);
  buf.copy(kept, at, start, end);
  lengths[slot] = len;
  strings[slot] = s;
  return s;
}
