import type { Node } from 'yaml';
import type { DescriptorSpec } from './spec.js';
import type { Reader } from './yaml-reader.js';

export const USAGE_KEYS = ['values'];

/** `usage: {values: [KEY, …]}` on a charge_mode descriptor: each charge, settlement, refund and expired
 * reservation of the rule goes to the usage ledger (docs/spend.md), with the values of the listed keys as the
 * request gave them (bounded, plain text only) and every other value of the descriptor as its fingerprint.
 * `ruleKeys`: the keys of the descriptor and those above it, the only ones a ledger line can name. */
export function readUsage(r: Reader, f: Map<string, Node>, path: string, ruleKeys: readonly string[], charge: boolean): DescriptorSpec['usage'] {
  const node = f.get('usage');
  if (node === undefined) return undefined;
  const at = `${path}.usage`;
  if (!charge) r.fail(node, at, 'only a charge_mode descriptor has a usage ledger: its events are charges, settlements and refunds');
  const g = r.fields(node, at, USAGE_KEYS);
  if (!g) return undefined;
  const values: string[] = [];
  for (const [i, item] of r.list(g.get('values'), `${at}.values`).entries()) {
    const key = r.string(item, `${at}.values[${i}]`, { nonEmpty: true });
    if (key === undefined) continue;
    if (!ruleKeys.includes(key)) r.fail(item, `${at}.values[${i}]`, `"${key}" is not a key of this descriptor or those above it: ${ruleKeys.join(', ')}`);
    else if (!values.includes(key)) values.push(key);
  }
  return { values };
}
