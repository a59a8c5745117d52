import { kindOf } from '../limits/kinds/index.js';
import type { CompiledConfig, CompiledLimit, Rule } from './compiled.js';

/** Rules by `domain/rule id`, as a reload's log line names them. */
export interface ConfigDiff {
  added: string[];
  removed: string[];
  changed: string[];
  /** `domain/rule per_<unit>`: limits moved between a window and a token bucket. A bucket has a key of its
   * own, so their counters start fresh (changing only a limit's numbers keeps them). */
  restarted: string[];
}

/** Per rule: one line saying everything a reload can change about it, and the unit of each of its limits
 * that is a token bucket (a bucket's counter is not a window's). */
export type RuleDigest = Map<string, { text: string; buckets: Set<string>; units: Set<string> }>;

export const ruleKey = (r: Rule): string => `${r.domain}/${r.id}`;

/** A limit as the digest compares it: what decides its counts (not how it is shown: cli.ts has that). */
const limitDigest = (l: CompiledLimit): string =>
  `${l.requestsPerUnit}/${l.unit}:${l.algorithm}:${l.burst}:${l.windowName}:${l.name}${l.replaces.length > 0 ? `>${l.replaces.join(',')}` : ''}`;

export function digestOf(r: Rule): { text: string; buckets: Set<string>; units: Set<string> } {
  const tiers = [...r.tierLimits].map(([t, ls]) => `${t}:${ls.map(limitDigest).join('+')}`);
  const limits = r.unlimited ? 'unlimited' : r.limits.map(limitDigest).join('+');
  const all = [...r.limits, ...[...r.tierLimits.values()].flat()];
  return {
    text: [
      limits,
      r.algorithm,
      r.shadow ? 'shadow' : '',
      r.quota ? 'quota' : '',
      r.variable.map((v) => (v ? 'v' : 'f')).join(''),
      r.metadata ? JSON.stringify(r.metadata) : '',
      r.refunds ? '' : 'no-refunds',
      r.charge ? `charge:${r.reservationKey ?? ''}:${r.reservationTtlMs}:${r.settlementKey ?? ''}` : '',
      r.inFlight ? `in_flight:${r.inFlight.leaseMs}:${r.inFlight.maxHoldMs ?? ''}:${r.inFlight.requestKey ?? ''}` : '',
      ...tiers,
    ].join(' '),
    buckets: new Set(all.filter((l) => kindOf(l.kind).refills).map((l) => l.unit)),
    units: new Set(all.map((l) => l.unit)),
  };
}

export function ruleDigest(c: CompiledConfig): RuleDigest {
  const out: RuleDigest = new Map();
  for (const d of c.domains.values()) for (const r of d.rules) out.set(ruleKey(r), digestOf(r));
  return out;
}

/** A short account of what a reload changed, rule by rule. */
export function diffDigests(a: RuleDigest, b: RuleDigest): ConfigDiff {
  const restarted: string[] = [];
  for (const [k, next] of b) {
    const was = a.get(k);
    if (!was) continue;
    for (const unit of next.units) {
      if (was.units.has(unit) && was.buckets.has(unit) !== next.buckets.has(unit)) restarted.push(`${k} per_${unit}`);
    }
  }
  return {
    added: [...b.keys()].filter((k) => !a.has(k)),
    removed: [...a.keys()].filter((k) => !b.has(k)),
    changed: [...b.keys()].filter((k) => a.has(k) && a.get(k)!.text !== b.get(k)!.text),
    restarted,
  };
}
