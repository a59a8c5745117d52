/** Descriptor values with `*` wildcards, as envoyproxy/ratelimit matches them (its README, Example 9, and
 * wildcardMatch in src/config/config_impl.go): a `*` may stand anywhere in the value, any number of times,
 * and each matches any run of characters, the empty one included. `foo*` is a prefix, `foo*bar` a prefix
 * and a suffix, `a*b*c` a, then b, then c, in that order.
 *
 * The pattern is split on `*` once, at load. A match checks the first part as a prefix and the last as a
 * suffix, then finds each middle part leftmost, after the one before: for patterns made only of literals and
 * `*`, the leftmost find never has to be undone. Each find goes forward from where the last one ended, so a
 * value is read about once per pattern, never backtracked: no regular expression (whose backtracking a
 * hostile value could make quadratic), and for a long part a Knuth-Morris-Pratt search (indexOf's worst case
 * is the value's length times the part's). */

/** Most wildcards one value may hold: each adds a scan of the value, and real patterns hold a few. */
export const MAX_WILDCARDS = 32;

export interface Glob {
  /** The pattern split on `*`: literals, in order (empty strings where `*`s touch or end the value). */
  readonly parts: readonly string[];
  /** Characters every matching value must have: the literals' total. */
  readonly fixed: number;
  /** Per part longer than SHORT_PART: its KMP failure table (undefined for short parts). */
  readonly tables: readonly (Int32Array | undefined)[];
}

/** Parts up to this long are found with indexOf: its worst case, the value's length times this, stays
 * linear. Longer ones with KMP. */
const SHORT_PART = 16;

export function isGlob(value: string): boolean {
  return value.includes('*');
}

export function compileGlob(pattern: string): Glob {
  const parts = pattern.split('*');
  return { parts, fixed: parts.reduce((n, p) => n + p.length, 0), tables: parts.map((p) => (p.length > SHORT_PART ? failureTable(p) : undefined)) };
}

export function globMatch(g: Glob, value: string): boolean {
  const parts = g.parts;
  if (parts.length === 1) return parts[0] === value;
  if (value.length < g.fixed) return false;
  const first = parts[0]!;
  const last = parts[parts.length - 1]!;
  if (!value.startsWith(first) || !value.endsWith(last)) return false;
  let at = first.length;
  const end = value.length - last.length;
  for (let i = 1; i < parts.length - 1; i++) {
    const part = parts[i]!;
    if (part === '') continue;
    const table = g.tables[i];
    const found = table ? kmpIndexOf(value, part, table, at, end) : value.indexOf(part, at);
    if (found === -1 || found + part.length > end) return false;
    at = found + part.length;
  }
  return true;
}

/** KMP's table: for each prefix of `p`, the length of its longest proper prefix that is also its suffix. */
function failureTable(p: string): Int32Array {
  const t = new Int32Array(p.length);
  for (let i = 1, k = 0; i < p.length; i++) {
    while (k > 0 && p.charCodeAt(i) !== p.charCodeAt(k)) k = t[k - 1]!;
    if (p.charCodeAt(i) === p.charCodeAt(k)) k++;
    t[i] = k;
  }
  return t;
}

/** The first index of `p` in `s` at or after `from` and ending by `end`, or -1: each character of `s` is
 * read a bounded number of times. */
function kmpIndexOf(s: string, p: string, t: Int32Array, from: number, end: number): number {
  for (let i = from, k = 0; i < end; i++) {
    const c = s.charCodeAt(i);
    while (k > 0 && c !== p.charCodeAt(k)) k = t[k - 1]!;
    if (c === p.charCodeAt(k)) k++;
    if (k === p.length) return i - p.length + 1;
  }
  return -1;
}
