import type { CompiledDomain, KeyBranch, MatchNode, Rule } from './compiled.js';

export interface EntryLike {
  key: string;
  value: string;
}

/** Finds the rule for one descriptor: entries are matched level by level (exact value, then the longest
 * prefix wildcard, then the key's default); the rule is the one on the node the last entry reaches.
 * Allocates nothing. */
export function matchRule(domain: CompiledDomain, entries: readonly EntryLike[]): Rule | undefined {
  let level: ReadonlyMap<string, KeyBranch> | undefined = domain.root;
  let node: MatchNode | undefined;
  for (let i = 0; i < entries.length; i++) {
    const entry = entries[i]!;
    const branch: KeyBranch | undefined = level?.get(entry.key);
    node = branch && step(branch, entry.value);
    if (!node) return undefined;
    level = node.children;
  }
  return node?.rule;
}

/** One level of matching: the node a value leads to under its key, in order of precedence. */
export function step(branch: KeyBranch, value: string): MatchNode | undefined {
  return branch.exact.get(value) ?? matchPrefix(branch, value) ?? branch.any;
}

export type MatchKind = 'exact' | 'wildcard' | 'default';

/** How `value` matched under `branch` (the same precedence as step()). */
export function matchKind(branch: KeyBranch, node: MatchNode, value: string): { kind: MatchKind; pattern?: string } {
  if (branch.exact.get(value) === node) return { kind: 'exact' };
  const prefix = branch.prefixes.find((p) => p.node === node && value.startsWith(p.prefix));
  if (prefix) return { kind: 'wildcard', pattern: `${prefix.prefix}*` };
  return { kind: 'default' };
}

function matchPrefix(branch: KeyBranch, value: string): MatchNode | undefined {
  for (const p of branch.prefixes) {
    if (value.startsWith(p.prefix)) return p.node;
  }
  return undefined;
}
