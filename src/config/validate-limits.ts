import { isMap, type Node } from 'yaml';
import { windowName } from '../counters/keys.js';
import type { LimitAlgorithm } from '../limits/kinds/algorithm.js';
import { KIND_CODES, ALGORITHMS as KINDS, kindOf } from '../limits/kinds/index.js';
import { ALGORITHMS, type Algorithm, type LimitSpec } from './spec.js';
import { CALENDAR_UNITS, MAX_LIMIT, MAX_WINDOW_SECONDS, parseUnit, UNIT_NAMES, UNITS, type Unit } from './units.js';
import type { Reader } from './yaml-reader.js';

export const RATE_LIMIT_KEYS = ['unit', 'requests_per_unit', 'unlimited', 'name', 'replaces', 'algorithm', 'burst', 'calendar', 'unit_multiplier'];
/** A tier's limit: no unlimited, no replaces (the schema's tierLimit holds the same keys). */
export const TIER_LIMIT_KEYS = ['unit', 'requests_per_unit', 'name', 'algorithm', 'burst', 'calendar', 'unit_multiplier'];

/** The limits of a descriptor (rate_limit, rate_limits, tier_limits), read and checked: units, counts,
 * names unique in the domain, algorithm and burst. validate.ts reads the rest of the file. */

export interface DescriptorContext {
  domain: string;
  tiers: string[];
  /** Limit names seen so far in the domain, to reject duplicates (replaces refers to them). */
  names: Map<string, string>;
  /** The names compile gives unnamed limits, which replaces may also refer to. */
  generated: Set<string>;
  /** Every replaces entry, checked against the names once the file is read. */
  replaces: { name: string; node: Node; path: string }[];
  /** The rule path of the descriptor being read (key, or key_value, per level), as compile builds it. */
  segments: string[];
  /** The keys of the descriptor being read and of those above it. */
  keys: string[];
  /** Rule paths seen so far, with their line: two descriptors must not share one. */
  rulePaths: Map<string, number>;
  /** The domain's algorithm, and the one the descriptor being read gives its limits (its own, else the
   * domain's): a limit's `burst` is checked against what applies to it. */
  algorithm: Algorithm;
  ruleAlgorithm: Algorithm;
}

export function readSingleLimit(
  r: Reader,
  node: Node | undefined,
  path: string,
  ctx: DescriptorContext,
): { limits: LimitSpec[]; unlimited: boolean } | undefined {
  if (node === undefined) return undefined;
  const f = r.fields(node, path, RATE_LIMIT_KEYS);
  if (!f) return { limits: [], unlimited: false };
  if (r.boolean(f.get('unlimited'), `${path}.unlimited`)) {
    // envoyproxy/ratelimit refuses a unit beside unlimited ("should not specify rate limit unit when
    // unlimited") and ignores requests_per_unit: so does Tollgate, with a note.
    for (const k of ['unit', 'algorithm', 'burst', 'calendar', 'unit_multiplier']) {
      if (f.has(k)) r.fail(f.get(k), `${path}.${k}`, 'has no meaning with unlimited: true');
    }
    if (f.has('requests_per_unit')) r.note(f.get('requests_per_unit'), `${path}.requests_per_unit`, 'ignored: the limit is unlimited');
    return { limits: [], unlimited: true };
  }
  const limit = readLimitFields(r, node, f, path, ctx, true);
  return { limits: limit ? [limit] : [], unlimited: false };
}

export function readLimitList(r: Reader, node: Node | undefined, path: string, ctx: DescriptorContext, named: boolean): LimitSpec[] {
  const out: LimitSpec[] = [];
  r.list(node, path).forEach((item, i) => {
    const at = `${path}[${i}]`;
    const f = r.fields(item, at, named ? RATE_LIMIT_KEYS.filter((k) => k !== 'unlimited') : TIER_LIMIT_KEYS);
    const limit = f && readLimitFields(r, item, f, at, ctx, named);
    if (!limit) return;
    const name = windowOf(limit);
    if (out.some((l) => windowOf(l) === name)) {
      r.fail(f.get('unit'), `${at}.unit`, `duplicate window: another limit in this list is per ${name}`);
      return;
    }
    out.push(limit);
  });
  if (node !== undefined && out.length === 0 && r.problems.length === 0) r.fail(node, path, 'must list at least one limit');
  return out;
}

function readLimitFields(r: Reader, node: Node, f: Map<string, Node>, path: string, ctx: DescriptorContext, named: boolean): LimitSpec | undefined {
  const unitText = r.string(f.get('unit'), `${path}.unit`, { nonEmpty: true });
  const unit = unitText === undefined ? undefined : parseUnit(unitText);
  if (!f.has('unit')) r.fail(node, `${path}.unit`, 'is required');
  else if (unitText !== undefined && unit === undefined) {
    r.fail(f.get('unit'), `${path}.unit`, `unknown unit "${unitText}" (use one of ${UNIT_NAMES.join(', ')})`);
  }
  const requestsPerUnit = r.count(f.get('requests_per_unit'), `${path}.requests_per_unit`, MAX_LIMIT);
  if (!f.has('requests_per_unit')) r.fail(node, `${path}.requests_per_unit`, 'is required');
  const name = r.string(f.get('name'), `${path}.name`, { nonEmpty: true });
  if (unit !== undefined) ctx.generated.add(`${ctx.domain}.${ctx.segments.join('.')}.per_${unit}`);
  if (name !== undefined && named) {
    const first = ctx.names.get(name);
    if (first) r.fail(f.get('name'), `${path}.name`, `duplicate limit name "${name}" (first used at ${first})`);
    else ctx.names.set(name, `${r.file}:${r.line(f.get('name'))}`);
  }
  const own = name ?? (unit === undefined ? undefined : `${ctx.domain}.${ctx.segments.join('.')}.per_${unit}`);
  const replaces = r.list(f.get('replaces'), `${path}.replaces`).flatMap((item, i) => {
    const rf = r.fields(item, `${path}.replaces[${i}]`, ['name']);
    const at = `${path}.replaces[${i}].name`;
    const n = rf && r.string(rf.get('name'), at, { nonEmpty: true });
    if (rf && !rf.has('name')) r.fail(item, at, 'is required');
    // envoyproxy/ratelimit: "replaces should not contain name of same descriptor" (src/config/config_impl.go).
    if (n !== undefined && n === own) r.fail(rf!.get('name'), at, `a limit cannot replace itself ("${n}")`);
    else if (n) ctx.replaces.push({ name: n, node: rf.get('name')!, path: at });
    return n === undefined ? [] : [n];
  });
  const { algorithm, burst } = readAlgorithm(r, f, path, ctx);
  if (unit === undefined || requestsPerUnit === undefined) return undefined;
  const { calendar, unitMultiplier } = readWindowShape(r, f, path, unit, algorithm ?? ctx.ruleAlgorithm);
  const kind = kindOf(KIND_CODES[algorithm ?? ctx.ruleAlgorithm]);
  if (!kind.exact(kind.burstOf(requestsPerUnit, burst) || requestsPerUnit, UNITS[unit].seconds * (unitMultiplier ?? 1) * 1000)) {
    const key = f.has('burst') ? 'burst' : 'requests_per_unit';
    r.fail(f.get(key), `${path}.${key}`, `too large for a ${kind.kind} per ${unit}`);
  }
  return { unit, requestsPerUnit, name, replaces, algorithm, burst, calendar, unitMultiplier };
}

/** The window a limit counts in, as its key names it: two limits of one list may not share one. */
function windowOf(l: LimitSpec): string {
  return windowName(l.unit, l.unitMultiplier ?? 1, l.calendar ?? false);
}

/** `calendar` (day, week, month, year; fixed windows only: a sliding window or a bucket has no calendar
 * boundary to keep) and `unit_multiplier` (whole number >= 1, the window at most ten years). */
function readWindowShape(r: Reader, f: Map<string, Node>, path: string, unit: Unit, algorithm: Algorithm): Pick<LimitSpec, 'calendar' | 'unitMultiplier'> {
  const calendar = r.boolean(f.get('calendar'), `${path}.calendar`);
  if (calendar && !CALENDAR_UNITS.includes(unit)) {
    r.fail(f.get('calendar'), `${path}.calendar`, `a calendar window is a day, week, month or year (this limit is per ${unit})`);
  } else if (calendar && !kindOf(KIND_CODES[algorithm]).calendar) {
    r.fail(f.get('calendar'), `${path}.calendar`, `only a ${kindsWith((k) => k.calendar)} limit has calendar windows (this limit is ${algorithm})`);
  }
  const unitMultiplier = r.count(f.get('unit_multiplier'), `${path}.unit_multiplier`);
  if (unitMultiplier === 0) r.fail(f.get('unit_multiplier'), `${path}.unit_multiplier`, 'must be at least 1');
  else if (unitMultiplier !== undefined && tooLong(unit, unitMultiplier, calendar === true)) {
    r.fail(f.get('unit_multiplier'), `${path}.unit_multiplier`, `${unitMultiplier} ${unit}s is longer than ten years`);
  }
  return { calendar: calendar || undefined, unitMultiplier: unitMultiplier || undefined };
}

/** Calendar months and years are counted as such (121 months of up to 31 days pass ten years, though 121 × 30
 * days do not); other windows by their length in seconds. */
const CALENDAR_MOST: Partial<Record<Unit, number>> = { month: 120, year: 10 };

function tooLong(unit: Unit, multiplier: number, calendar: boolean): boolean {
  const most = calendar ? CALENDAR_MOST[unit] : undefined;
  return most !== undefined ? multiplier > most : UNITS[unit].seconds * multiplier > MAX_WINDOW_SECONDS;
}

/** A limit's own `algorithm`, and its `burst`, which only a token bucket has (whole number >= 1). */
export function readAlgorithm(r: Reader, f: Map<string, Node>, path: string, ctx: DescriptorContext): Pick<LimitSpec, 'algorithm' | 'burst'> {
  const algorithm = r.oneOf(f.get('algorithm'), `${path}.algorithm`, ALGORITHMS);
  const burst = r.count(f.get('burst'), `${path}.burst`);
  const applies = algorithm ?? ctx.ruleAlgorithm;
  if (f.has('burst') && !kindOf(KIND_CODES[applies]).configKeys.includes('burst')) {
    r.fail(f.get('burst'), `${path}.burst`, `only a ${kindsWith((k) => k.configKeys.includes('burst'))} limit has a burst (this limit is ${applies})`);
  } else if (burst === 0) {
    r.fail(f.get('burst'), `${path}.burst`, 'must be at least 1');
  }
  return { algorithm, burst };
}

export function readTierLimits(r: Reader, node: Node | undefined, path: string, ctx: DescriptorContext): Map<string, LimitSpec[]> {
  const out = new Map<string, LimitSpec[]>();
  if (node === undefined) return out;
  if (!isMap(node)) {
    r.fail(node, path, 'must map tier names to lists of limits');
    return out;
  }
  for (const pair of node.items) {
    const tier = r.string(pair.key as Node, path, { nonEmpty: true });
    if (tier === undefined) continue;
    if (!ctx.tiers.includes(tier)) {
      r.fail(pair.key as Node, `${path}.${tier}`, `unknown tier "${tier}" (declare it under tiers: at the top of the file)`);
      continue;
    }
    out.set(tier, readLimitList(r, pair.value as Node, `${path}.${tier}`, ctx, false));
  }
  return out;
}

/** The kinds that have something, as an error names them: "fixed_window", "a or b". */
function kindsWith(has: (k: LimitAlgorithm) => boolean): string {
  return KINDS.filter(has)
    .map((k) => k.kind)
    .join(' or ');
}
