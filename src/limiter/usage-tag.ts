import type { Rule } from '../config/compiled.js';
import { cachedFingerprint } from '../fingerprint.js';
import type { UsageTag } from '../limits/check.js';

/** What a ledger event may carry of a value as the request gave it: short plain text (a tenant id, a model
 * name), never one that reads as a fingerprint. Anything else goes as its fingerprint. */
const PLAIN_VALUE = /^(?!fp:)[A-Za-z0-9._:@/+-]{1,64}$/;

/** The usage tag of a descriptor of a rule with `usage` (config/validate-usage.ts): its domain, rule and the
 * values of the rule's keys, as JSON: those the config lists verbatim when plain, every other as `fp:<its
 * fingerprint>`. Entries the rule's path does not name (a request id) are left out: the event carries the
 * reservation's id by fingerprint. */
export function usageTag(rule: Rule, entries: readonly { key: string; value: string }[]): UsageTag {
  const values: Record<string, string> = {};
  for (const e of entries) {
    if (!rule.keys.includes(e.key) || e.key in values) continue;
    const verbatim = rule.usage!.values.includes(e.key) && PLAIN_VALUE.test(e.value);
    values[e.key] = verbatim ? e.value : `fp:${cachedFingerprint(e.value)}`;
  }
  return { domain: rule.domain, rule: rule.id, values: JSON.stringify(values) };
}
