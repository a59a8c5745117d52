import type { Rule } from '../config/compiled.js';
import type { Metadata } from '../config/spec.js';
import { cachedFingerprint } from '../fingerprint.js';
import type { Decision, DecisionInput } from '../limiter/limiter.js';

/** Quota-aware routing (Envoy AI Gateway's proposal 009): which backends still have quota, for Envoy to pick among.
 * The shape is envoyproxy/ratelimit's open PR #1243 (its src/service/ratelimit.go, passedBackendsList): with
 * RESPONSE_DYNAMIC_METADATA and at least one quota-mode descriptor, `passedBackends` lists one
 * `{backend_name, model_name_override}` per quota group still under quota, a group being the descriptors that
 * share those two entries' values (AI Gateway's QuotaPolicy names a backend and a model by them). A descriptor
 * that passed is listed unless its group has a descriptor over; one with neither entry is not; no list when
 * none is left. Envoy stores it in the filter's `metadata_namespace` (1.39; `envoy.filters.http.ratelimit`
 * unless set), where a picker reads it.
 *
 * One difference, on purpose: a value is shown as written only where the matched rule fixes it (config text,
 * as AI Gateway's translator writes every backend and model); a value the request chose is its fingerprint. */

export const BACKEND_KEY = 'backend_name';
export const MODEL_KEY = 'model_name_override';

interface Group {
  over: boolean;
}

export function passedBackends(input: DecisionInput, d: Decision): Metadata[] | undefined {
  const groups = new Map<string, Group>();
  const keys: (string | undefined)[] = [];
  d.descriptors.forEach((o, i) => {
    if (o.unlimited || !o.quota) return;
    const key = groupKey(input.descriptors[i]!.entries);
    keys[i] = key;
    const g = groups.get(key) ?? { over: false };
    g.over ||= o.over && !o.shadowStatus;
    groups.set(key, g);
  });
  if (groups.size === 0) return undefined;
  const seen = new Set<string>();
  const out: Metadata[] = [];
  d.descriptors.forEach((o, i) => {
    if (o.unlimited || (o.over && !o.shadowStatus)) return;
    if (keys[i] !== undefined && groups.get(keys[i]!)!.over) return;
    const shown = shownPair(input.descriptors[i]!.entries, o.rule);
    const key = keys[i] ?? groupKey(input.descriptors[i]!.entries);
    if (!shown || seen.has(key)) return;
    seen.add(key);
    out.push(shown);
  });
  return out.length > 0 ? out : undefined;
}

type Entries = DecisionInput['descriptors'][number]['entries'];

function lastOf(entries: Entries, key: string): number {
  for (let i = entries.length - 1; i >= 0; i--) if (entries[i]!.key === key) return i;
  return -1;
}

/** The two entries' values, or the whole entry list when the descriptor has neither (never merged with another). */
function groupKey(entries: Entries): string {
  // The last of a key wins, as #1243's loop over the entries has it.
  const backend = entries[lastOf(entries, BACKEND_KEY)]?.value ?? '';
  const model = entries[lastOf(entries, MODEL_KEY)]?.value ?? '';
  if (backend !== '' || model !== '') return `${backend.length}:${backend}|${model}`;
  return entries.map((e) => `${e.key.length}:${e.key}=${e.value.length}:${e.value}`).join(';');
}

/** The pair as #1243 lists it (both keys, '' for one missing), or undefined when the descriptor has neither. */
function shownPair(entries: Entries, rule: Rule | undefined): Metadata | undefined {
  const [b, m] = [lastOf(entries, BACKEND_KEY), lastOf(entries, MODEL_KEY)];
  const value = (i: number): string => {
    if (i < 0 || entries[i]!.value === '') return '';
    // Config text only where the config wrote this very value (a shared wildcard fixes the counter, not the value).
    const fixed = rule !== undefined && rule.keys[i] === entries[i]!.key && rule.exactValues[i] === entries[i]!.value;
    return fixed ? entries[i]!.value : `fp:${cachedFingerprint(entries[i]!.value)}`;
  };
  if ((b < 0 || entries[b]!.value === '') && (m < 0 || entries[m]!.value === '')) return undefined;
  return { [BACKEND_KEY]: value(b), [MODEL_KEY]: value(m) };
}
