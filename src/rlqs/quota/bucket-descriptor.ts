import type { CompiledDomain, KeyBranch } from '../../config/compiled.js';
import { type EntryLike, step } from '../../config/match.js';

/** How an RLQS BucketId (an unordered map of strings, built by Envoy's bucket_id_builder) becomes the ordered
 * descriptor a descriptor config matches. A map has no order and a descriptor path does, so the config gives
 * it: starting at the domain's top level, the entry taken next is the first of the remaining keys, in code
 * point order, that has a node at this level (its exact value, a wildcard it matches, or the key's default);
 * when no remaining key has one, the rest follow in code point order. So {token: t, category: read} becomes
 * [category=read, token=t] under the bundled config, as Envoy's RLS filter would send it, and a map holding a
 * key no rule reaches matches nothing (its bucket is unmatched, as a descriptor with an extra entry is). */
export function bucketEntries(domain: CompiledDomain | undefined, bucket: Readonly<Record<string, string>>): EntryLike[] {
  const remaining = Object.keys(bucket).sort(byCodePoint);
  const entries: EntryLike[] = [];
  let level: ReadonlyMap<string, KeyBranch> | undefined = domain?.root;
  while (level && remaining.length > 0) {
    const at = nextKey(level, remaining, bucket);
    if (at < 0) break;
    const key = remaining.splice(at, 1)[0]!;
    const value = bucket[key]!;
    entries.push({ key, value });
    level = step(level.get(key)!, value)!.children;
  }
  for (const key of remaining) entries.push({ key, value: bucket[key]! });
  return entries;
}

/** The index in `keys` of the first key with a node at this level for its value, or -1. */
function nextKey(level: ReadonlyMap<string, KeyBranch>, keys: readonly string[], bucket: Readonly<Record<string, string>>): number {
  for (let i = 0; i < keys.length; i++) {
    const branch = level.get(keys[i]!);
    if (branch && step(branch, bucket[keys[i]!]!)) return i;
  }
  return -1;
}

/** Code point order (not the locale's): the same on every replica and every Node version. */
function byCodePoint(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
