import type { CompiledDomain, KeyBranch, MatchNode, Rule } from './compiled.js';

export interface EntryLike {
  key: string;
  value: string;
}

export type MatchKind = 'exact' | 'wildcard' | 'default';

/** How one entry matched, for explanations. The walk stops at the first entry that matches nothing. */
export interface MatchStep {
  matched: MatchKind | 'none';
  /** False when the entry before led to a node without children: there was no level to look in. */
  level: boolean;
  /** The config has this key at this level (so the key is config text, even when its value matched nothing). */
  knownKey: boolean;
  /** The prefix wildcard that matched, as written (`/admin*`). */
  pattern?: string;
  /** Where the matched descriptor is written (file:line). */
  source?: string;
}

/** Finds the rule for one descriptor: entries are matched level by level (exact value, then the longest
 * prefix wildcard, then the key's default); the rule is the one on the node the last entry reaches.
 * Allocates nothing unless `trace` is given, which receives one step per entry tried. */
export function matchRule(domain: CompiledDomain, entries: readonly EntryLike[], trace?: MatchStep[]): Rule | undefined {
  let level: ReadonlyMap<string, KeyBranch> | undefined = domain.root;
  let node: MatchNode | undefined;
  for (let i = 0; i < entries.length; i++) {
    const entry = entries[i]!;
    const branch: KeyBranch | undefined = level?.get(entry.key);
    node = branch && step(branch, entry.value);
    if (trace) trace.push(traced(level !== undefined, branch, node, entry.value));
    if (!node) return undefined;
    level = node.children;
  }
  return node?.rule;
}

/** One level of matching: the node a value leads to under its key, in order of precedence. */
export function step(branch: KeyBranch, value: string): MatchNode | undefined {
  return branch.exact.get(value) ?? matchPrefix(branch, value) ?? branch.any;
}

/** How `value` reached `node` under `branch` (step() chose it): told apart by which of the branch's nodes it is. */
export function matchKind(branch: KeyBranch, node: MatchNode, value: string): { kind: MatchKind; pattern?: string } {
  if (branch.exact.get(value) === node) return { kind: 'exact' };
  const prefix = branch.prefixes.find((p) => p.node === node && value.startsWith(p.prefix));
  if (prefix) return { kind: 'wildcard', pattern: `${prefix.prefix}*` };
  return { kind: 'default' };
}

function traced(level: boolean, branch: KeyBranch | undefined, node: MatchNode | undefined, value: string): MatchStep {
  if (!branch || !node) return { matched: 'none', level, knownKey: branch !== undefined };
  const how = matchKind(branch, node, value);
  return { matched: how.kind, level, knownKey: true, ...(how.pattern && { pattern: how.pattern }), source: node.source };
}

function matchPrefix(branch: KeyBranch, value: string): MatchNode | undefined {
  for (const p of branch.prefixes) {
    if (value.startsWith(p.prefix)) return p.node;
  }
  return undefined;
}
