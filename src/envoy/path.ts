import type { ConnectionManagerSpec } from './spec.js';

/** Path normalisation, in the order ConnectionManagerUtility::maybeNormalizePath applies it. */

export type NormalizedPath = { kind: 'ok'; path: string; redirect: boolean } | { kind: 'rejected'; status: 400; reason: string };

/** The :path routes and filters see: fragment dropped, escaped slashes handled, then (if on) the RFC 3986
 * canonicalisation and slash merging. Each step works on the path before the query only. */
export function normalizeRequestPath(path: string, cm: ConnectionManagerSpec): NormalizedPath {
  let p = path.includes('#') ? path.slice(0, path.indexOf('#')) : path;
  let redirect = false;
  if (cm.escapedSlashes !== 'KEEP_UNCHANGED') {
    const unescaped = onPathPart(p, (part) => part.replace(/%2f/gi, '/').replace(/%5c/gi, '\\'));
    if (unescaped !== p) {
      if (cm.escapedSlashes === 'REJECT_REQUEST') return { kind: 'rejected', status: 400, reason: 'escaped slash' };
      redirect = cm.escapedSlashes === 'UNESCAPE_AND_REDIRECT';
      p = unescaped;
    }
  }
  if (cm.normalizePath) {
    const q = p.indexOf('?');
    const canonical = canonicalizePath(q === -1 ? p : p.slice(0, q));
    if (canonical === undefined) return { kind: 'rejected', status: 400, reason: 'path normalisation failed' };
    p = canonical + (q === -1 ? '' : p.slice(q));
  }
  if (cm.mergeSlashes) p = onPathPart(p, mergeSlashes);
  return { kind: 'ok', path: p, redirect };
}

function onPathPart(path: string, f: (part: string) => string): string {
  const q = path.indexOf('?');
  return q === -1 ? f(path) : f(path.slice(0, q)) + path.slice(q);
}

function mergeSlashes(part: string): string {
  if (!part.includes('//')) return part;
  const inner = part
    .split('/')
    .filter((s) => s !== '')
    .join('/');
  return (part.startsWith('/') ? '/' : '') + inner + (part.endsWith('/') ? '/' : '');
}

// Character classes of Chromium's kPathCharLookup (url_canon_path.cc), which Envoy's normalize_path uses.
const PASS = 0;
const SPECIAL = 1;
const ESCAPE = 3;
const UNESCAPE = 4;
const INVALID = 9;
const PATH_CHARS: Uint8Array = (() => {
  const t = new Uint8Array(256).fill(ESCAPE); // controls, space and every byte >= 0x7f are escaped
  t[0] = INVALID;
  for (const c of "!$&'()*+,/:;=@[]") t[c.charCodeAt(0)] = PASS;
  for (const c of '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-_~') t[c.charCodeAt(0)] = UNESCAPE;
  t['.'.charCodeAt(0)] = SPECIAL;
  return t;
})();

/** Chromium's CanonicalizePath on the path before the query: dot segments (also written %2e) resolved,
 * backslashes made slashes, escapes of unreserved characters (A-Z a-z 0-9 - . _ ~) decoded, other escapes
 * kept as sent, characters that must be escaped escaped. Undefined where Chromium reports failure (NUL),
 * which Envoy answers with 400. Its nested-escape repair (%%30%30) is not modelled. */
export function canonicalizePath(part: string): string | undefined {
  const src = Array.from(new TextEncoder().encode(part));
  const out: number[] = [];
  let ok = true;
  if (src[0] !== 0x2f && src[0] !== 0x5c) out.push(0x2f);
  for (let i = 0; i < src.length; i++) {
    const ch = src[i]!;
    const flags = PATH_CHARS[ch]!;
    if (!(flags & SPECIAL)) {
      out.push(ch);
      continue;
    }
    const dot = dotLength(src, i);
    if (dot > 0) i = handleDot(src, i, dot, out);
    else if (ch === 0x5c) out.push(0x2f);
    else if (ch === 0x25) i = handlePercent(src, i, out, () => (ok = false));
    else {
      if (flags === INVALID) ok = false;
      out.push(...escaped(ch));
    }
  }
  return ok ? Buffer.from(out).toString('latin1') : undefined; // every byte left is ASCII
}

function dotLength(src: number[], i: number): number {
  if (src[i] === 0x2e) return 1;
  const isE = src[i + 2] === 0x65 || src[i + 2] === 0x45;
  return src[i] === 0x25 && src[i + 1] === 0x32 && isE ? 3 : 0;
}

const isSlash = (c: number | undefined): boolean => c === 0x2f || c === 0x5c;

/** A dot after a slash is a segment: "." is dropped, ".." removes the previous segment. Returns the last
 * input index consumed. */
function handleDot(src: number[], i: number, dot: number, out: number[]): number {
  if (out[out.length - 1] !== 0x2f) {
    out.push(0x2e);
    return i + dot - 1;
  }
  const after = i + dot;
  if (after === src.length) return after - 1;
  if (isSlash(src[after])) return after;
  const second = dotLength(src, after);
  const afterSecond = after + second;
  if (second > 0 && (afterSecond === src.length || isSlash(src[afterSecond]))) {
    backUpToPreviousSlash(out);
    return afterSecond === src.length ? afterSecond - 1 : afterSecond;
  }
  out.push(0x2e);
  return i + dot - 1;
}

function backUpToPreviousSlash(out: number[]): void {
  let i = out.length - 1;
  if (i === 0) return;
  i--;
  while (out[i] !== 0x2f && i > 0) i--;
  out.length = i + 1;
}

function handlePercent(src: number[], i: number, out: number[], invalid: () => void): number {
  const hex = (c: number | undefined): number => (c === undefined ? -1 : parseInt(String.fromCharCode(c), 16));
  const hi = hex(src[i + 1]);
  const lo = hex(src[i + 2]);
  if (Number.isNaN(hi) || Number.isNaN(lo) || hi < 0 || lo < 0) {
    out.push(0x25); // an invalid escape passes through
    return i;
  }
  const value = hi * 16 + lo;
  const flags = PATH_CHARS[value]!;
  if (flags === UNESCAPE) out.push(value);
  else {
    out.push(0x25, src[i + 1]!, src[i + 2]!); // kept exactly as sent, hex case included
    if (flags === INVALID) invalid();
  }
  return i + 2;
}

function escaped(byte: number): number[] {
  return Array.from(`%${byte.toString(16).toUpperCase().padStart(2, '0')}`, (c) => c.charCodeAt(0));
}
