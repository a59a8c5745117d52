import type { CompiledDomain, KeyBranch, MatchNode, Rule, WildcardNode } from './compiled.js';
import { globMatch } from './glob.js';

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
  /** The wildcard value that matched, as written (`/admin*`). */
  pattern?: string;
  /** The wildcard has share_threshold: every value it matches shares one counter. */
  shared?: boolean;
  /** Where the matched descriptor is written (file:line). */
  source?: string;
  /** When nothing matched: what the config has at this level (config text only): its keys, and for a known
   * key its exact values and wildcard patterns, so a tool can say what was expected. */
  expected?: { keys: string[]; values: string[] };
}

/** Finds the rule for one descriptor: entries are matched level by level (exact value, then the first
 * wildcard that matches, in file order, then the key's default: envoyproxy/ratelimit's GetLimit in
 * src/config/config_impl.go); the rule is the one on the node the last entry reaches.
 * Allocates nothing unless `trace` is given, which receives one step per entry tried. */
export function matchRule(domain: CompiledDomain, entries: readonly EntryLike[], trace?: MatchStep[]): Rule | undefined {
  let level: ReadonlyMap<string, KeyBranch> | undefined = domain.root;
  let node: MatchNode | undefined;
  for (let i = 0; i < entries.length; i++) {
    const entry = entries[i]!;
    const branch: KeyBranch | undefined = level?.get(entry.key);
    node = branch && step(branch, entry.value);
    if (trace) trace.push(traced(level, branch, node, entry.value));
    if (!node) return undefined;
    level = node.children;
  }
  return node?.rule;
}

/** One level of matching: the node a value leads to under its key, in order of precedence. */
export function step(branch: KeyBranch, value: string): MatchNode | undefined {
  return branch.exact.get(value) ?? matchPattern(branch, value)?.node ?? branch.any;
}

/** How `value` reached `node` under `branch` (step() chose it): told apart by which of the branch's nodes it is. */
export function matchKind(branch: KeyBranch, node: MatchNode, value: string): { kind: MatchKind; pattern?: string; shared?: boolean } {
  if (branch.exact.get(value) === node) return { kind: 'exact' };
  const wildcard = matchPattern(branch, value);
  if (wildcard && wildcard.node === node) return { kind: 'wildcard', pattern: wildcard.pattern, shared: wildcard.shared };
  return { kind: 'default' };
}

function traced(level: ReadonlyMap<string, KeyBranch> | undefined, branch: KeyBranch | undefined, node: MatchNode | undefined, value: string): MatchStep {
  if (!branch || !node) {
    const expected = level && { keys: [...level.keys()], values: branch ? [...branch.exact.keys(), ...branch.patterns.map((p) => p.pattern)] : [] };
    return { matched: 'none', level: level !== undefined, knownKey: branch !== undefined, ...(expected && { expected }) };
  }
  const how = matchKind(branch, node, value);
  return {
    matched: how.kind,
    level: level !== undefined,
    knownKey: true,
    ...(how.pattern && { pattern: how.pattern, shared: how.shared }),
    source: node.source,
  };
}

function matchPattern(branch: KeyBranch, value: string): WildcardNode | undefined {
  for (const p of branch.patterns) {
    if (globMatch(p.glob, value)) return p;
  }
  return undefined;
}
