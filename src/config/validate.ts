import { isMap, isScalar, isSeq, LineCounter, type Node, parseDocument, type YAMLMap } from 'yaml';
import type { ConfigProblem } from './errors.js';
import { MAX_WILDCARDS } from './glob.js';
import { ALGORITHMS, type Algorithm, DEFAULT_HEADERS, type DescriptorSpec, type DomainSpec, type HeaderSpec, type LimitSpec, type Metadata } from './spec.js';
import { bucketIsExact, MAX_UINT32, parseUnit, UNIT_NAMES } from './units.js';

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
];
export const RATE_LIMIT_KEYS = ['unit', 'requests_per_unit', 'unlimited', 'name', 'replaces', 'algorithm', 'burst'];
export const HEADER_KEYS = ['style', 'limit', 'remaining', 'reset', 'window'];

/** Keys accepted for envoyproxy/ratelimit's sake that change nothing in Tollgate: a config using them gets a
 * note (not an error), so nobody expects per-value metrics that never appear. */
const NO_EFFECT: Record<string, string> = {
  detailed_metric:
    'has no effect in Tollgate: metrics are labelled by rule, never by a descriptor value (accepted for compatibility with envoyproxy/ratelimit)',
  value_to_metric:
    'has no effect in Tollgate: metrics are labelled by rule, never by a descriptor value (accepted for compatibility with envoyproxy/ratelimit)',
};

/** Walks one YAML document, collecting every problem with its file, line, column and key path. */
class Reader {
  readonly problems: ConfigProblem[] = [];
  /** Things that load but deserve a word: `file:line: key: note`. */
  readonly notes: string[] = [];
  constructor(
    readonly file: string,
    private readonly lines: LineCounter,
  ) {}

  fail(node: Node | null | undefined, key: string, message: string): void {
    const offset = node?.range?.[0] ?? 0;
    const { line, col } = this.lines.linePos(offset);
    this.problems.push({ file: this.file, line, column: col, key, message });
  }

  note(node: Node | undefined, key: string, message: string): void {
    this.notes.push(`${this.file}:${this.line(node)}: ${key}: ${message}`);
  }

  line(node: Node | null | undefined): number {
    return this.lines.linePos(node?.range?.[0] ?? 0).line;
  }

  /** The map's entries, after reporting keys that are not in `allowed`. */
  fields(node: unknown, path: string, allowed: readonly string[]): Map<string, Node> | undefined {
    if (!isMap(node)) {
      this.fail(node as Node, path, 'must be a mapping');
      return undefined;
    }
    const out = new Map<string, Node>();
    for (const pair of (node as YAMLMap).items) {
      const keyNode = pair.key as Node;
      const name = isScalar(keyNode) ? String(keyNode.value) : '';
      const at = path ? `${path}.${name}` : name;
      if (!allowed.includes(name)) {
        this.fail(keyNode, at, `unknown key (allowed: ${allowed.join(', ')})`);
        continue;
      }
      out.set(name, (pair.value ?? keyNode) as Node);
    }
    return out;
  }

  string(node: Node | undefined, path: string, opts: { nonEmpty?: boolean; numbers?: boolean } = {}): string | undefined {
    if (node === undefined) {
      return undefined;
    }
    if (isScalar(node) && typeof node.value === 'string') {
      if (opts.nonEmpty && node.value === '') this.fail(node, path, 'must not be empty');
      return node.value;
    }
    if (opts.numbers && isScalar(node) && typeof node.value === 'number') return String(node.source ?? node.value);
    this.fail(node, path, 'must be a string');
    return undefined;
  }

  boolean(node: Node | undefined, path: string): boolean {
    if (node === undefined) return false;
    if (isScalar(node) && typeof node.value === 'boolean') return node.value;
    this.fail(node, path, 'must be true or false');
    return false;
  }

  count(node: Node | undefined, path: string): number | undefined {
    if (node === undefined) return undefined;
    const v = isScalar(node) ? node.value : undefined;
    if (typeof v !== 'number' || !Number.isInteger(v)) {
      this.fail(node, path, 'must be a whole number');
    } else if (v < 0) {
      this.fail(node, path, `must not be negative (got ${v})`);
    } else if (v > MAX_UINT32) {
      this.fail(node, path, `must be at most ${MAX_UINT32}`);
    } else {
      return v;
    }
    return undefined;
  }

  oneOf<T extends string>(node: Node | undefined, path: string, options: readonly T[]): T | undefined {
    const text = this.string(node, path);
    if (text === undefined) return undefined;
    if ((options as readonly string[]).includes(text)) return text as T;
    this.fail(node, path, `must be one of ${options.join(', ')} (got "${text}")`);
    return undefined;
  }

  list(node: Node | undefined, path: string): Node[] {
    // `descriptors:` with nothing after it is an empty list, as envoyproxy/ratelimit reads it.
    if (node === undefined || (isScalar(node) && node.value === null)) return [];
    if (isSeq(node)) return node.items as Node[];
    this.fail(node, path, 'must be a list');
    return [];
  }
}

/** What validating one file found: the domain (undefined when the file has problems, listed in `out`), and
 * its name and line whenever the file names one, so a domain defined twice is reported together with every
 * other problem rather than only once both files are otherwise valid. */
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
  const algorithm = r.oneOf(f.get('algorithm'), 'algorithm', ALGORITHMS) ?? 'fixed_window';
  const ctx: DescriptorContext = {
    domain: domain ?? '',
    tiers,
    names: new Map(),
    generated: new Set(),
    replaces: [],
    segments: [],
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

function readHeaders(r: Reader, node: Node | undefined): HeaderSpec {
  if (node === undefined) return DEFAULT_HEADERS;
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
  };
}

interface DescriptorContext {
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
  /** Rule paths seen so far, with their line: two descriptors must not share one. */
  rulePaths: Map<string, number>;
  /** The domain's algorithm, and the one the descriptor being read gives its limits (its own, else the
   * domain's): a limit's `burst` is checked against what applies to it. */
  algorithm: Algorithm;
  ruleAlgorithm: Algorithm;
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
  // Read before the limits: a limit's burst is valid only where a token bucket applies.
  const algorithm = r.oneOf(f.get('algorithm'), `${path}.algorithm`, ALGORITHMS);
  ctx.ruleAlgorithm = algorithm ?? ctx.algorithm;
  const single = readSingleLimit(r, f.get('rate_limit'), `${path}.rate_limit`, ctx);
  const limits = single ? single.limits : readLimitList(r, f.get('rate_limits'), `${path}.rate_limits`, ctx, true);
  const shadow = r.boolean(f.get('shadow_mode'), `${path}.shadow_mode`);
  const quota = r.boolean(f.get('quota_mode'), `${path}.quota_mode`);
  const metadata = readMetadata(r, f.get('metadata'), `${path}.metadata`);
  const tierLimits = readTierLimits(r, f.get('tier_limits'), `${path}.tier_limits`, ctx);
  metricOption(r, f, 'detailed_metric', path);
  const children = readDescriptorList(r, f.get('descriptors'), `${path}.descriptors`, ctx);
  metricOption(r, f, 'value_to_metric', path);
  const spec: DescriptorSpec = {
    key,
    value,
    shareThreshold,
    quota,
    metadata,
    line: r.line(node),
    limits,
    unlimited: single?.unlimited ?? false,
    shadow,
    algorithm,
    tierLimits,
    children,
  };
  ctx.segments.pop();
  return spec;
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

function readSingleLimit(r: Reader, node: Node | undefined, path: string, ctx: DescriptorContext): { limits: LimitSpec[]; unlimited: boolean } | undefined {
  if (node === undefined) return undefined;
  const f = r.fields(node, path, RATE_LIMIT_KEYS);
  if (!f) return { limits: [], unlimited: false };
  if (r.boolean(f.get('unlimited'), `${path}.unlimited`)) {
    // envoyproxy/ratelimit refuses a unit beside unlimited ("should not specify rate limit unit when
    // unlimited") and ignores requests_per_unit: so does Tollgate, with a note.
    for (const k of ['unit', 'algorithm', 'burst']) {
      if (f.has(k)) r.fail(f.get(k), `${path}.${k}`, 'has no meaning with unlimited: true');
    }
    if (f.has('requests_per_unit')) r.note(f.get('requests_per_unit'), `${path}.requests_per_unit`, 'ignored: the limit is unlimited');
    return { limits: [], unlimited: true };
  }
  const limit = readLimitFields(r, node, f, path, ctx, true);
  return { limits: limit ? [limit] : [], unlimited: false };
}

function readLimitList(r: Reader, node: Node | undefined, path: string, ctx: DescriptorContext, named: boolean): LimitSpec[] {
  const out: LimitSpec[] = [];
  r.list(node, path).forEach((item, i) => {
    const at = `${path}[${i}]`;
    const f = r.fields(item, at, named ? RATE_LIMIT_KEYS.filter((k) => k !== 'unlimited') : ['unit', 'requests_per_unit', 'name', 'algorithm', 'burst']);
    const limit = f && readLimitFields(r, item, f, at, ctx, named);
    if (!limit) return;
    if (out.some((l) => l.unit === limit.unit)) {
      r.fail(f.get('unit'), `${at}.unit`, `duplicate window: another limit in this list is per ${limit.unit}`);
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
  const requestsPerUnit = r.count(f.get('requests_per_unit'), `${path}.requests_per_unit`);
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
  if ((algorithm ?? ctx.ruleAlgorithm) === 'token_bucket' && !bucketIsExact(burst ?? requestsPerUnit, unit)) {
    r.fail(
      f.get(f.has('burst') ? 'burst' : 'requests_per_unit'),
      `${path}.${f.has('burst') ? 'burst' : 'requests_per_unit'}`,
      `too large for a token bucket per ${unit}`,
    );
  }
  return { unit, requestsPerUnit, name, replaces, algorithm, burst };
}

/** A limit's own `algorithm`, and its `burst`, which only a token bucket has (whole number >= 1). */
function readAlgorithm(r: Reader, f: Map<string, Node>, path: string, ctx: DescriptorContext): Pick<LimitSpec, 'algorithm' | 'burst'> {
  const algorithm = r.oneOf(f.get('algorithm'), `${path}.algorithm`, ALGORITHMS);
  const burst = r.count(f.get('burst'), `${path}.burst`);
  const applies = algorithm ?? ctx.ruleAlgorithm;
  if (f.has('burst') && applies !== 'token_bucket') {
    r.fail(f.get('burst'), `${path}.burst`, `only a token_bucket limit has a burst (this limit is ${applies})`);
  } else if (burst === 0) {
    r.fail(f.get('burst'), `${path}.burst`, 'must be at least 1');
  }
  return { algorithm, burst };
}

function readTierLimits(r: Reader, node: Node | undefined, path: string, ctx: DescriptorContext): Map<string, LimitSpec[]> {
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

export type { Algorithm };
