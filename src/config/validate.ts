import { isMap, isScalar, LineCounter, type Node, parseDocument } from 'yaml';
import { DEFAULT_KIND, SLOT_KIND } from '../limits/kinds/index.js';
import type { ConfigProblem } from './errors.js';
import { MAX_WILDCARDS } from './glob.js';
import { ALGORITHMS, type Algorithm, DEFAULT_HEADERS, type DescriptorSpec, type DomainSpec, type HeaderSpec, type Metadata } from './spec.js';
import { durationMs, readInFlight, readRefunds } from './validate-in-flight.js';
import { type DescriptorContext, readLimitList, readSingleLimit, readTierLimits } from './validate-limits.js';
import { readUsage } from './validate-usage.js';
import { Reader } from './yaml-reader.js';

// Exported so the JSON Schema (schema/descriptor-config.schema.json) can be held to the same keys.
export const DOMAIN_KEYS = ['domain', 'descriptors', 'response_headers', 'tiers', 'token_key', 'algorithm'];
export const DESCRIPTOR_KEYS = [
  'key',
  'value',
  'rate_limit',
  'rate_limits',
  'shadow_mode',
  'descriptors',
  'algorithm',
  'tier_limits',
  'detailed_metric',
  'value_to_metric',
  'share_threshold',
  'quota_mode',
  'metadata',
  'charge_mode',
  'reservation_key',
  'reservation_ttl',
  'settlement_key',
  SLOT_KIND.kind, // a descriptor's slots: `in_flight`, the slot kind's name
  'refunds',
  'usage',
];
export { IN_FLIGHT_KEYS } from './validate-in-flight.js';
export { RATE_LIMIT_KEYS, TIER_LIMIT_KEYS } from './validate-limits.js';
export { USAGE_KEYS } from './validate-usage.js';
export const HEADER_KEYS = ['style', 'limit', 'remaining', 'reset', 'window', 'units'];

/** Keys accepted for envoyproxy/ratelimit's sake that change nothing in Tollgate: a config using them gets a
 * note (not an error), so nobody expects per-value metrics that never appear. */
const NO_EFFECT: Record<string, string> = {
  detailed_metric:
    'has no effect in Tollgate: metrics are labelled by rule, never by a descriptor value (accepted for compatibility with envoyproxy/ratelimit)',
  value_to_metric:
    'has no effect in Tollgate: metrics are labelled by rule, never by a descriptor value (accepted for compatibility with envoyproxy/ratelimit)',
};

export interface ValidatedFile {
  spec: DomainSpec | undefined;
  domain: { name: string; line: number } | undefined;
}

/** Parses and validates one file's text. `merged`: the file may be one of several of its domain
 * (MERGE_DOMAIN_CONFIG), so a `replaces` may name a limit of another file: not checked here (envoyproxy/
 * ratelimit never checks it). */
export function validateDomainFile(file: string, text: string, out: ConfigProblem[], merged = false): ValidatedFile {
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, uniqueKeys: true });
  const r = new Reader(file, lines);
  for (const err of doc.errors) {
    const pos = err.linePos?.[0] ?? { line: 1, col: 1 };
    out.push({ file, line: pos.line, column: pos.col, key: '', message: yamlMessage(err.message) || err.code });
  }
  if (doc.errors.length > 0) return { spec: undefined, domain: undefined };
  const spec = readDomain(r, doc.contents as Node, merged);
  out.push(...r.problems);
  const domain = spec && spec.domain !== '' ? { name: spec.domain, line: spec.line } : undefined;
  return { spec: r.problems.length === 0 ? spec : undefined, domain };
}

/** The yaml library's message without its own "at line L, column C:" and the excerpt after it: the
 * problem's file:line:column already says where. */
function yamlMessage(message: string): string {
  return (message.split('\n')[0] ?? '').replace(/\s*at line \d+, column \d+:?\s*$/, '').trim();
}

function readDomain(r: Reader, root: Node | null, merged: boolean): DomainSpec | undefined {
  if (root === null) {
    r.fail(undefined, '', 'the file is empty');
    return undefined;
  }
  const f = r.fields(root, '', DOMAIN_KEYS);
  if (!f) return undefined;
  const domain = r.string(f.get('domain'), 'domain', { nonEmpty: true });
  if (domain === undefined) r.fail(root, 'domain', 'is required');
  const tiers = readTierNames(r, f.get('tiers'));
  const algorithm = r.oneOf(f.get('algorithm'), 'algorithm', ALGORITHMS) ?? (DEFAULT_KIND as Algorithm);
  const ctx: DescriptorContext = {
    domain: domain ?? '',
    tiers,
    names: new Map(),
    generated: new Set(),
    replaces: [],
    segments: [],
    keys: [],
    rulePaths: new Map(),
    algorithm,
    ruleAlgorithm: algorithm,
  };
  const spec: DomainSpec = {
    domain: domain ?? '',
    file: r.file,
    line: r.line(f.get('domain')),
    headers: readHeaders(r, f.get('response_headers')),
    tiers,
    tokenKey: r.string(f.get('token_key'), 'token_key', { nonEmpty: true }) ?? 'token',
    algorithm,
    descriptors: readDescriptorList(r, f.get('descriptors'), 'descriptors', ctx),
    notes: r.notes,
  };
  if (!merged) checkReplaces(r, ctx);
  return spec;
}

/** `replaces` names a limit of the same domain: one written with `name:`, or an unnamed one by the name
 * Tollgate gives it (`<domain>.<rule path>.per_<unit>`). Any other name replaces nothing, silently, so it
 * is almost surely a typo. Checked once the whole file is read, as a limit may be named after it is
 * replaced. */
function checkReplaces(r: Reader, ctx: DescriptorContext): void {
  for (const ref of ctx.replaces) {
    if (ctx.names.has(ref.name) || ctx.generated.has(ref.name)) continue;
    r.fail(
      ref.node,
      ref.path,
      `no limit named "${ref.name}" in this domain: replaces must name a limit (its name: or, if unnamed, <domain>.<rule path>.per_<unit>)`,
    );
  }
}

function readTierNames(r: Reader, node: Node | undefined): string[] {
  if (node === undefined) return [];
  if (!isMap(node)) {
    r.fail(node, 'tiers', 'must be a mapping of tier names');
    return [];
  }
  const names: string[] = [];
  for (const pair of node.items) {
    const name = r.string(pair.key as Node, 'tiers', { nonEmpty: true });
    if (name === undefined) continue;
    // A tier's body is reserved for tier-wide options; none exist yet, so it must be empty or {}.
    const body = pair.value as Node | null;
    if (body !== null && !(isScalar(body) && body.value === null)) r.fields(body, `tiers.${name}`, []);
    names.push(name);
  }
  return names;
}

function readHeaders(r: Reader, node: Node | undefined): HeaderSpec | undefined {
  if (node === undefined) return undefined;
  if (isScalar(node)) {
    const style = r.oneOf(node, 'response_headers', ['x-ratelimit', 'draft', 'none'] as const);
    return { ...DEFAULT_HEADERS, style: style ?? 'x-ratelimit' };
  }
  const f = r.fields(node, 'response_headers', HEADER_KEYS);
  if (!f) return DEFAULT_HEADERS;
  const name = (k: 'limit' | 'remaining' | 'reset'): string => {
    const v = r.string(f.get(k), `response_headers.${k}`, { nonEmpty: true });
    if (v !== undefined && !/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/.test(v)) {
      r.fail(f.get(k), `response_headers.${k}`, `"${v}" is not a valid HTTP header name`);
    }
    return v ?? DEFAULT_HEADERS[k];
  };
  return {
    style: r.oneOf(f.get('style'), 'response_headers.style', ['x-ratelimit', 'draft', 'none'] as const) ?? 'x-ratelimit',
    limit: name('limit'),
    remaining: name('remaining'),
    reset: name('reset'),
    window: r.oneOf(f.get('window'), 'response_headers.window', ['longest', 'tightest'] as const) ?? 'longest',
    units: readUnits(r, f.get('units')),
  };
}

/** A word or two for what limits count (the 429 body says it): letters, spaces and hyphens, at most 32. */
function readUnits(r: Reader, node: Node | undefined): string {
  const v = r.string(node, 'response_headers.units', { nonEmpty: true });
  if (v !== undefined && !/^[A-Za-z][A-Za-z -]{0,31}$/.test(v))
    r.fail(node, 'response_headers.units', 'must be a word or two of letters (tokens, rows), at most 32');
  return v ?? DEFAULT_HEADERS.units;
}

function readDescriptorList(r: Reader, node: Node | undefined, path: string, ctx: DescriptorContext): DescriptorSpec[] {
  const out: DescriptorSpec[] = [];
  const seen = new Set<string>();
  r.list(node, path).forEach((item, i) => {
    const d = readDescriptor(r, item, `${path}[${i}]`, ctx);
    if (!d) return;
    const id = d.value === undefined ? d.key : `${d.key}=${d.value}`;
    if (seen.has(id)) {
      r.fail(item, `${path}[${i}]`, `duplicate descriptor ${id} at this level`);
      return;
    }
    seen.add(id);
    checkRulePath(r, item, `${path}[${i}]`, [...ctx.segments, d.value === undefined ? d.key : `${d.key}_${d.value}`].join('.'), ctx);
    out.push(d);
  });
  return out;
}

/** The rule path (segments joined by '.') names a rule's counters, metric labels and default limit names. A
 * key `a.b` and a key `a` with a child `b` (or values `x_y` and `x` + `_y` one level apart) spell the same
 * path: they would share all three without a word, so the second is refused. */
function checkRulePath(r: Reader, node: Node, path: string, rulePath: string, ctx: DescriptorContext): void {
  const first = ctx.rulePaths.get(rulePath);
  if (first === undefined) ctx.rulePaths.set(rulePath, r.line(node));
  else
    r.fail(
      node,
      path,
      `rule path "${rulePath}" is also the path of the descriptor at line ${first}: they would share counters, metric labels and limit names; ` +
        `rename a key or value`,
    );
}

function readDescriptor(r: Reader, node: Node, path: string, ctx: DescriptorContext): DescriptorSpec | undefined {
  const f = r.fields(node, path, DESCRIPTOR_KEYS);
  if (!f) return undefined;
  const key = r.string(f.get('key'), `${path}.key`, { nonEmpty: true });
  if (key === undefined) {
    if (!f.has('key')) r.fail(node, `${path}.key`, 'is required');
    return undefined;
  }
  const value = r.string(f.get('value'), `${path}.value`, { numbers: true });
  const wildcards = value === undefined ? 0 : value.split('*').length - 1;
  if (wildcards > MAX_WILDCARDS) {
    r.fail(f.get('value'), `${path}.value`, `${wildcards} wildcards "*": at most ${MAX_WILDCARDS} in one value`);
  }
  const shareThreshold = r.boolean(f.get('share_threshold'), `${path}.share_threshold`);
  if (shareThreshold && wildcards === 0) {
    // envoyproxy/ratelimit refuses it too (src/config/config_impl.go): there is nothing to share.
    r.fail(f.get('share_threshold'), `${path}.share_threshold`, 'share_threshold can only be used with a wildcard value (one holding "*")');
  }
  if (f.has('rate_limit') && f.has('rate_limits')) {
    r.fail(f.get('rate_limits'), `${path}.rate_limits`, 'use rate_limit or rate_limits, not both');
  }
  ctx.segments.push(value === undefined ? key : `${key}_${value}`);
  ctx.keys.push(key);
  // Read before the limits: a limit's burst is valid only where a token bucket applies.
  const algorithm = r.oneOf(f.get('algorithm'), `${path}.algorithm`, ALGORITHMS);
  ctx.ruleAlgorithm = algorithm ?? ctx.algorithm;
  const single = readSingleLimit(r, f.get('rate_limit'), `${path}.rate_limit`, ctx);
  const limits = single ? single.limits : readLimitList(r, f.get('rate_limits'), `${path}.rate_limits`, ctx, true);
  const shadow = r.boolean(f.get('shadow_mode'), `${path}.shadow_mode`);
  const quota = r.boolean(f.get('quota_mode'), `${path}.quota_mode`);
  const charge = readCharge(r, f, path, ctx.keys);
  const inFlight = readInFlight(r, f, path, ctx.keys, ctx.tiers);
  const refunds = readRefunds(r, f, path, inFlight !== undefined);
  const metadata = readMetadata(r, f.get('metadata'), `${path}.metadata`);
  // An in_flight rule's tier_limits are slots, read with it.
  const tierLimits = f.has(SLOT_KIND.kind) ? new Map() : readTierLimits(r, f.get('tier_limits'), `${path}.tier_limits`, ctx);
  metricOption(r, f, 'detailed_metric', path);
  const children = readDescriptorList(r, f.get('descriptors'), `${path}.descriptors`, ctx);
  metricOption(r, f, 'value_to_metric', path);
  const spec: DescriptorSpec = {
    key,
    value,
    shareThreshold,
    quota,
    ...charge,
    metadata,
    inFlight,
    ...(refunds === false && { refunds }),
    line: r.line(node),
    limits,
    unlimited: single?.unlimited ?? false,
    shadow,
    algorithm,
    tierLimits,
    children,
  };
  ctx.segments.pop();
  ctx.keys.pop();
  return spec;
}

/** An unsettled reservation is kept 10 minutes unless `reservation_ttl` says; at most a day (each is held in
 * the store until then). */
export const DEFAULT_RESERVATION_TTL_MS = 600_000;
const MAX_RESERVATION_TTL_MS = 86_400_000;

/** charge_mode, and the reservation_key, reservation_ttl, settlement_key and usage that only a charge-mode
 * descriptor has (`ruleKeys`: what a usage ledger may name). */
function readCharge(
  r: Reader,
  f: Map<string, Node>,
  path: string,
  ruleKeys: readonly string[],
): Pick<DescriptorSpec, 'charge' | 'reservationKey' | 'reservationTtlMs' | 'settlementKey' | 'usage'> {
  const charge = r.boolean(f.get('charge_mode'), `${path}.charge_mode`);
  const reservationKey = r.string(f.get('reservation_key'), `${path}.reservation_key`, { nonEmpty: true });
  if (reservationKey !== undefined && !charge) r.fail(f.get('reservation_key'), `${path}.reservation_key`, 'only a charge_mode descriptor has reservations');
  let reservationTtlMs = DEFAULT_RESERVATION_TTL_MS;
  const ttl = f.get('reservation_ttl');
  if (ttl !== undefined) {
    const ms = durationMs(r.string(ttl, `${path}.reservation_ttl`));
    if (!f.has('reservation_key')) r.fail(ttl, `${path}.reservation_ttl`, 'only a descriptor with a reservation_key has reservations');
    else if (ms === undefined || ms < 1000 || ms > MAX_RESERVATION_TTL_MS) {
      r.fail(ttl, `${path}.reservation_ttl`, 'must be a duration from 1s to 24h, in whole seconds, minutes or hours (30s, 10m, 1h)');
    } else reservationTtlMs = ms;
  }
  const settlementKey = r.string(f.get('settlement_key'), `${path}.settlement_key`, { nonEmpty: true });
  if (settlementKey !== undefined && reservationKey === undefined) {
    r.fail(f.get('settlement_key'), `${path}.settlement_key`, 'only a descriptor with a reservation_key settles');
  } else if (settlementKey !== undefined && settlementKey === reservationKey) {
    r.fail(f.get('settlement_key'), `${path}.settlement_key`, "must differ from reservation_key: it tells the stream's end from the request");
  }
  const usage = readUsage(r, f, path, ruleKeys, charge);
  return { charge, reservationKey, reservationTtlMs, settlementKey, ...(usage && { usage }) };
}

/** A descriptor's metadata: a mapping of anything (envoyproxy/ratelimit does not look inside it either),
 * returned in the response's dynamic_metadata. */
function readMetadata(r: Reader, node: Node | undefined, path: string): Metadata | undefined {
  if (node === undefined || (isScalar(node) && node.value === null)) return undefined;
  if (!isMap(node)) {
    r.fail(node, path, 'must be a mapping');
    return undefined;
  }
  const json = node.toJSON() as Metadata;
  return Object.keys(json).length === 0 ? undefined : json;
}

/** detailed_metric / value_to_metric: checked to be a boolean, with a note when it asks for what Tollgate
 * never does (metrics are labelled by rule, never by a descriptor value). */
function metricOption(r: Reader, f: Map<string, Node>, name: keyof typeof NO_EFFECT, path: string): void {
  if (r.boolean(f.get(name), `${path}.${name}`)) r.note(f.get(name), `${path}.${name}`, NO_EFFECT[name]!);
}

export type { Algorithm };
