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
    if (!branch) return undefined;
    node = branch.exact.get(entry.value) ?? matchPrefix(branch, entry.value) ?? branch.any;
    if (!node) return undefined;
    level = node.children;
  }
  return node?.rule;
}

function matchPrefix(branch: KeyBranch, value: string): MatchNode | undefined {
  for (const p of branch.prefixes) {
    if (value.startsWith(p.prefix)) return p.node;
  }
  return undefined;
}
