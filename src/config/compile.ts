import { EPOCH_ALIGNED, FROM_MONDAY } from '../counters/calendar.js';
import { counterId, windowName } from '../counters/keys.js';
import { KIND_CODES, kindOf, SLOT_KIND } from '../limits/kinds/index.js';
import type { CompiledDomain, CompiledLimit, KeyBranch, MatchNode, Rule, WildcardNode } from './compiled.js';
import { compileGlob, isGlob } from './glob.js';
import type { Algorithm, DescriptorSpec, DomainSpec, InFlightSpec, LimitSpec } from './spec.js';
import { UNITS, type Unit } from './units.js';

/** Turns a validated domain into the lookup tree used on every request. Runs once per (re)load. */
export function compileDomain(spec: DomainSpec): CompiledDomain {
  const rules: Rule[] = [];
  const root = compileLevel(spec, spec.descriptors, { segments: [], keys: [], variable: [], values: [] }, rules, undefined);
  return {
    name: spec.domain,
    file: spec.file,
    headers: spec.headers,
    tiers: new Set(spec.tiers),
    tokenKey: spec.tokenKey,
    root,
    rules,
    notes: spec.notes,
    ...(spec.calendarMonths && { calendarMonths: true }),
    reservationKeys: new Set(rules.flatMap((r) => [r.reservationKey, r.settlementKey].filter((k): k is string => k !== undefined))),
    slotKeys: new Set(rules.flatMap((r) => (r.inFlight?.requestKey === undefined ? [] : [r.inFlight.requestKey]))),
  };
}

/** Where a node sits: its path segments (key or key_value), entry keys, and which entries vary. */
interface Path {
  segments: string[];
  keys: string[];
  variable: boolean[];
  values: (string | undefined)[];
}

function compileLevel(spec: DomainSpec, list: DescriptorSpec[], path: Path, rules: Rule[], category: string | undefined): Map<string, KeyBranch> {
  const out = new Map<string, { exact: Map<string, MatchNode>; patterns: WildcardNode[]; any: MatchNode | undefined }>();
  for (const d of list) {
    let branch = out.get(d.key);
    if (!branch) {
      branch = { exact: new Map(), patterns: [], any: undefined };
      out.set(d.key, branch);
    }
    const isExact = d.value !== undefined && !isGlob(d.value);
    const segment = d.value === undefined ? d.key : `${d.key}_${d.value}`;
    // A value is part of the counter unless the config fixes it, or a shared wildcard stands for all of them.
    const variable = !isExact && !d.shareThreshold;
    const here: Path = {
      segments: [...path.segments, segment],
      keys: [...path.keys, d.key],
      variable: [...path.variable, variable],
      values: [...path.values, isExact ? d.value : undefined],
    };
    const node = compileNode(spec, d, here, rules, category ?? (isExact ? d.value! : ''));
    if (d.value === undefined) branch.any = node;
    else if (isExact) branch.exact.set(d.value, node);
    else branch.patterns.push({ pattern: d.value, glob: compileGlob(d.value), shared: d.shareThreshold, node }); // file order: the first match wins
  }
  return out;
}

function compileNode(spec: DomainSpec, d: DescriptorSpec, path: Path, rules: Rule[], category: string): MatchNode {
  let rule: Rule | undefined;
  if (d.limits.length > 0 || d.unlimited || d.tierLimits.size > 0 || d.inFlight) {
    const id = path.segments.join('.');
    const algorithm = d.algorithm ?? spec.algorithm;
    rule = {
      domain: spec.domain,
      id,
      counterId: counterId(spec.domain, id),
      source: `${d.file ?? spec.file}:${d.line}`,
      limits: d.inFlight ? [slotsLimit(d.inFlight, spec.domain, id)] : d.limits.map((l) => compileLimit(l, spec.domain, id, algorithm)),
      inFlight: d.inFlight,
      refunds: d.refunds !== false,
      usage: d.usage,
      unlimited: d.unlimited,
      shadow: d.shadow,
      quota: d.quota,
      charge: d.charge,
      reservationKey: d.reservationKey,
      reservationTtlMs: d.reservationTtlMs,
      settlementKey: d.settlementKey,
      metadata: d.metadata,
      algorithm,
      tierLimits: d.inFlight
        ? new Map([...(d.inFlight.tiers ?? [])].map(([t, n]) => [t, [slotsLimit({ ...d.inFlight!, limit: n }, spec.domain, id)]]))
        : new Map([...d.tierLimits].map(([t, ls]) => [t, ls.map((l) => compileLimit(l, spec.domain, id, algorithm))])),
      keys: path.keys,
      variable: path.variable,
      exactValues: path.values,
      category,
    };
    rules.push(rule);
  }
  const children = d.children.length > 0 ? compileLevel(spec, d.children, path, rules, category) : undefined;
  return { source: `${d.file ?? spec.file}:${d.line}`, rule, children };
}

/** Envoy's own MONTH limit on a domain read under USE_CALENDAR_MONTH_RATE_LIMIT (calendar-months.ts): a
 * calendar month, as the config's own. */
export function calendarMonth(domain: CompiledDomain, unit: Unit): true | undefined {
  return (domain.calendarMonths && unit === 'month') || undefined;
}

/** `ruleAlgorithm`: the rule's (or domain's) algorithm, used when the limit names none of its own. */
export function compileLimit(l: LimitSpec, domain: string, ruleId: string, ruleAlgorithm: Algorithm): CompiledLimit {
  const algorithm = l.algorithm ?? ruleAlgorithm;
  const multiplier = l.unitMultiplier ?? 1;
  return {
    unit: l.unit,
    unitCode: UNITS[l.unit].code,
    windowSeconds: UNITS[l.unit].seconds * multiplier,
    windowName: windowName(l.unit, multiplier, l.calendar ?? false),
    calendar: calendarCode(l.unit, multiplier, l.calendar ?? false),
    requestsPerUnit: l.requestsPerUnit,
    // Unnamed limits get a stable name so statuses and metrics can still tell windows apart.
    name: l.name ?? `${domain}.${ruleId}.per_${l.unit}`,
    named: l.name !== undefined,
    replaces: l.replaces,
    algorithm,
    kind: KIND_CODES[algorithm],
    burst: kindOf(KIND_CODES[algorithm]).burstOf(l.requestsPerUnit, l.burst),
  };
}

/** An in_flight rule's one limit: its slots, held for at most the lease. The wire's unit is UNKNOWN (0):
 * the limit is of requests at once, per no unit of time. */
function slotsLimit(f: InFlightSpec, domain: string, ruleId: string): CompiledLimit {
  return {
    unit: 'second',
    unitCode: 0,
    windowSeconds: f.leaseMs / 1000,
    windowName: SLOT_KIND.kind,
    calendar: EPOCH_ALIGNED,
    requestsPerUnit: f.limit,
    name: `${domain}.${ruleId}.in_flight`,
    named: false,
    replaces: [],
    algorithm: SLOT_KIND.kind,
    kind: KIND_CODES[SLOT_KIND.kind],
    burst: 0,
  };
}

/** counters/calendar.ts's alignment code of a window: months per window for calendar months and years,
 * Monday for calendar weeks; a calendar day is already aligned by the epoch. */
function calendarCode(unit: LimitSpec['unit'], multiplier: number, calendar: boolean): number {
  if (!calendar) return EPOCH_ALIGNED;
  if (unit === 'month') return multiplier;
  if (unit === 'year') return 12 * multiplier;
  return unit === 'week' ? FROM_MONDAY : EPOCH_ALIGNED;
}
