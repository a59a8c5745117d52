import { existsSync, readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import type { Enum, Field, MapField, Type } from 'protobufjs';
import protobuf from 'protobufjs';
import type { Pair, YAMLMap, Node as YamlNode } from 'yaml';
import { isMap, isScalar, isSeq, LineCounter, parseDocument, Scalar } from 'yaml';

/** Checks an Envoy bootstrap YAML file against Envoy's own API protos, the way Envoy reads it: YAML scalars
 * typed as Envoy's YAML-to-JSON step types them (yaml-cpp: unquoted yes/no/on/off are booleans), then the
 * proto3 JSON mapping from envoy.config.bootstrap.v3.Bootstrap down, every typed_config resolved by its
 * "@type". Reports unknown fields, wrong JSON types (Duration as a string like "0.05s", wrappers as plain
 * values), invalid enum values, a oneof set twice, a required field or oneof left unset (protoc-gen-validate's
 * presence rules only), deprecated fields and enum values, and clusters named but not defined, each with the
 * file line.
 *
 * The protos are the ones @grpc/grpc-js-xds ships (deps/envoy-api and its dependencies), loaded by package:
 * Envoy lays package a.b.v3 out as directory a/b/v3/. */

export interface SchemaProblem {
  line: number;
  /** Where in the document, e.g. static_resources.clusters[0].connect_timeout. */
  path: string;
  message: string;
}

export interface SchemaReport {
  problems: SchemaProblem[];
  /** Every message.field the file sets, for the record of what was checked. */
  fieldsSeen: Set<string>;
}

const require = createRequire(import.meta.url);
const XDS_DEPS = join(dirname(require.resolve('@grpc/grpc-js-xds/package.json')), 'deps');
const INCLUDE_ROOTS = [
  join(XDS_DEPS, 'envoy-api'),
  join(XDS_DEPS, 'xds'), // udpa/ and xds/ (cncf/xds)
  join(XDS_DEPS, 'googleapis'),
  join(XDS_DEPS, 'protoc-gen-validate'),
  dirname(require.resolve('protobufjs/package.json')), // google/protobuf/descriptor.proto
];
const BOOTSTRAP = 'envoy.config.bootstrap.v3.Bootstrap';
const WRAPPERS: Record<string, string> = {
  DoubleValue: 'double',
  FloatValue: 'float',
  Int64Value: 'int64',
  UInt64Value: 'uint64',
  Int32Value: 'int32',
  UInt32Value: 'uint32',
  BoolValue: 'bool',
  StringValue: 'string',
  BytesValue: 'bytes',
};
/** Fields that name a cluster, and the field that defines one. */
const CLUSTER_REFS = new Set([
  'envoy.config.route.v3.RouteAction.cluster',
  'envoy.config.route.v3.WeightedCluster.ClusterWeight.name',
  'envoy.config.route.v3.RouteAction.RequestMirrorPolicy.cluster',
  'envoy.config.core.v3.GrpcService.EnvoyGrpc.cluster_name',
  'envoy.config.core.v3.HttpUri.cluster',
]);
const CLUSTER_DEF = 'envoy.config.cluster.v3.Cluster.name';

/** Envoy's API: a protobufjs root loaded on demand, one package directory at a time. */
export class EnvoyApi {
  private readonly root = new protobuf.Root();
  private readonly loaded = new Set<string>();

  /** `envoy133`: the API as of Envoy 1.33 (its fields added to the protos @grpc/grpc-js-xds ships); `envoy138`:
   * as of Envoy 1.38 (1.33's and is_negative_hits); `envoy139`, `envoy140`: as of 1.39 and 1.40 (each with what
   * came before). */
  constructor(opts: { envoy133?: boolean; envoy138?: boolean; envoy139?: boolean; envoy140?: boolean } = {}) {
    this.root.resolvePath = (_origin, target) => INCLUDE_ROOTS.map((r) => join(r, target)).find((p) => existsSync(p)) ?? target;
    this.loadPackage('envoy.config.bootstrap.v3');
    const from138 = opts.envoy138 || opts.envoy139 || opts.envoy140;
    if (opts.envoy133 || from138) this.addEnvoy133Fields();
    if (from138) this.addEnvoy138Fields();
    if (opts.envoy139 || opts.envoy140) this.addEnvoy139Fields();
    if (opts.envoy140) this.addEnvoy140Fields();
  }

  /** The HTTP rate-limit filter's field of Envoy 1.39: the dynamic metadata namespace it writes the service's
   * dynamic_metadata under. Transcribed from go-control-plane at 2b88c1617 (2026-08-21),
   * envoy/extensions/filters/http/ratelimit/v3/rate_limit.pb.go: RateLimit.metadata_namespace, bytes 18. */
  private addEnvoy139Fields(): void {
    const filter = this.message('envoy.extensions.filters.http.ratelimit.v3.RateLimit')!;
    const field = new protobuf.Field('metadata_namespace', 18, 'string');
    filter.add(field);
    field.resolve();
  }

  /** What Envoy 1.40 added that Tollgate's shipped files use, transcribed from go-control-plane at 2b88c1617
   * (2026-08-21): rate_limit.pb.go's RateLimit.enable_retry_after_header (varint 19: Retry-After on a 429 from the
   * largest duration_until_reset, envoyproxy/envoy PR #46289), and the jwt_claim rate-limit descriptor extension,
   * envoy/extensions/rate_limit_descriptors/jwt_claim/v3/jwt_claim.pb.go (PR #46138): Descriptor with
   * descriptor_key 1, header_name 2, value_prefix 3, claim_name 4, default_value 5 (strings), skip_if_absent 6. */
  private addEnvoy140Fields(): void {
    const filter = this.message('envoy.extensions.filters.http.ratelimit.v3.RateLimit')!;
    const retryAfter = new protobuf.Field('enable_retry_after_header', 19, 'bool');
    filter.add(retryAfter);
    retryAfter.resolve();
    const descriptor = new protobuf.Type('Descriptor');
    for (const [name, id] of [
      ['descriptor_key', 1],
      ['header_name', 2],
      ['value_prefix', 3],
      ['claim_name', 4],
      ['default_value', 5],
    ] as const) {
      descriptor.add(new protobuf.Field(name, id, 'string'));
    }
    descriptor.add(new protobuf.Field('skip_if_absent', 6, 'bool'));
    this.root.define('envoy.extensions.rate_limit_descriptors.jwt_claim.v3').add(descriptor);
    for (const f of descriptor.fieldsArray) f.resolve();
  }

  /** The field Envoy 1.38.0 added to the route's hits_addend (envoyproxy/envoy #44059): transcribed from
   * api/envoy/config/route/v3/route_components.proto as go-control-plane generates it
   * (envoy/config/route/v3/route_components.pb.go, 2026-08-21: RateLimit.HitsAddend.is_negative_hits, varint 3). */
  private addEnvoy138Fields(): void {
    const hitsAddend = this.message('envoy.config.route.v3.RateLimit.HitsAddend')!;
    const field = new protobuf.Field('is_negative_hits', 3, 'bool');
    hitsAddend.add(field);
    field.resolve();
  }

  /** The rate-limit fields Envoy 1.33.0 added (its changelogs/1.33.0.yaml), which the protos @grpc/grpc-js-xds
   * ships (an older Envoy API) lack. Transcribed, field numbers and types, from envoyproxy/data-plane-api
   * commit 84e84367 (2026-01-29): api/envoy/config/route/v3/route_components.proto (RateLimit.HitsAddend,
   * RateLimit.hits_addend = 5, RateLimit.apply_on_stream_done = 6) and
   * api/envoy/extensions/filters/http/ratelimit/v3/rate_limit.proto (RateLimitPerRoute.rate_limits = 3, whose
   * type became config.route.v3.RateLimit in #37684, replacing the filter's own RateLimitConfig of 2021). */
  private addEnvoy133Fields(): void {
    this.loadPackage('envoy.extensions.filters.http.ratelimit.v3');
    const rateLimit = this.message('envoy.config.route.v3.RateLimit')!;
    const hitsAddend = new protobuf.Type('HitsAddend');
    hitsAddend.add(new protobuf.Field('number', 1, '.google.protobuf.UInt64Value'));
    hitsAddend.add(new protobuf.Field('format', 2, 'string'));
    rateLimit.add(hitsAddend);
    const added = [new protobuf.Field('hits_addend', 5, 'HitsAddend'), new protobuf.Field('apply_on_stream_done', 6, 'bool')];
    for (const f of added) rateLimit.add(f);
    const perRoute = this.message('envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute')!;
    perRoute.remove(perRoute.fields.rate_limits!);
    added.push(new protobuf.Field('rate_limits', 3, '.envoy.config.route.v3.RateLimit', 'repeated'));
    perRoute.add(added[2]!);
    // The root was resolved before these were added: each is resolved on its own.
    for (const f of [...added, ...hitsAddend.fieldsArray]) f.resolve();
  }

  /** The message type of a full name, loading its package when it is a v3 Envoy or xds package. */
  message(fullName: string): Type | undefined {
    const found = this.lookup(fullName);
    if (found || !/\.v3(alpha)?$/.test(packageOf(fullName))) return found;
    this.loadPackage(packageOf(fullName));
    return this.lookup(fullName);
  }

  private lookup(fullName: string): Type | undefined {
    const t = this.root.lookup(fullName);
    return t instanceof protobuf.Type ? t : undefined;
  }

  private loadPackage(pkg: string): void {
    if (this.loaded.has(pkg)) return;
    this.loaded.add(pkg);
    const rel = pkg.split('.').join('/');
    const dir = INCLUDE_ROOTS.map((r) => join(r, rel)).find((d) => existsSync(d));
    if (!dir) return;
    const files = readdirSync(dir)
      .filter((f) => f.endsWith('.proto'))
      .map((f) => `${rel}/${f}`);
    this.root.loadSync(files, { keepCase: true });
    this.root.resolveAll();
  }
}

/** The package of a message name: the part before the first capitalised segment. */
function packageOf(fullName: string): string {
  const parts = fullName.split('.');
  const first = parts.findIndex((p) => /^[A-Z]/.test(p));
  return parts.slice(0, first === -1 ? parts.length : first).join('.');
}

interface Ctx {
  api: EnvoyApi;
  lines: LineCounter;
  report: SchemaReport;
  clustersDefined: Set<string>;
  clustersNamed: { name: string; line: number; path: string }[];
}

/** Checks one YAML text as an Envoy bootstrap. */
export function checkEnvoyYaml(text: string, api: EnvoyApi): SchemaReport {
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, keepSourceTokens: true });
  const report: SchemaReport = { problems: [], fieldsSeen: new Set() };
  for (const e of doc.errors) report.problems.push({ line: e.linePos?.[0].line ?? 0, path: '', message: `YAML: ${e.message}` });
  const ctx: Ctx = { api, lines, report, clustersDefined: new Set(), clustersNamed: [] };
  const bootstrap = api.message(BOOTSTRAP)!;
  if (isMap(doc.contents)) checkMessage(doc.contents, bootstrap, ctx, '');
  else problem(ctx, doc.contents, '', 'the document must be a mapping (a Bootstrap)');
  for (const ref of ctx.clustersNamed) {
    if (!ctx.clustersDefined.has(ref.name))
      ctx.report.problems.push({ line: ref.line, path: ref.path, message: `cluster "${ref.name}" is not defined in static_resources.clusters` });
  }
  report.problems.sort((a, b) => a.line - b.line);
  return report;
}

function lineOf(ctx: Ctx, node: YamlNode | null | undefined): number {
  return node?.range ? ctx.lines.linePos(node.range[0]).line : 0;
}

function problem(ctx: Ctx, node: YamlNode | null | undefined, path: string, message: string): void {
  ctx.report.problems.push({ line: lineOf(ctx, node), path, message });
}

const camel = (snake: string): string => snake.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());

/** A mapping as a message: known fields (proto or JSON name), oneofs set once, nothing deprecated. */
function checkMessage(map: YAMLMap, type: Type, ctx: Ctx, path: string, skip: string[] = []): void {
  const byName = new Map<string, Field>();
  for (const f of type.fieldsArray) byName.set(f.name, f).set(camel(f.name), f);
  const oneofSeen = new Map<string, string>();
  const set = new Set<string>();
  for (const pair of map.items as Pair<YamlNode, YamlNode>[]) {
    const key = isScalar(pair.key) ? String(pair.key.value) : '';
    if (skip.includes(key)) continue;
    const where = path ? `${path}.${key}` : key;
    const field = byName.get(key);
    if (!field) {
      problem(ctx, pair.key, where, `unknown field "${key}" in ${type.fullName.slice(1)}${suggest(key, type)}`);
      continue;
    }
    ctx.report.fieldsSeen.add(`${type.fullName.slice(1)}.${field.name}`);
    checkOneof(field, oneofSeen, ctx, pair.key, where);
    if (isDeprecated(field.options)) problem(ctx, pair.key, where, `deprecated field ${type.fullName.slice(1)}.${field.name}${since(field.options)}`);
    if (pair.value !== null && !(isScalar(pair.value) && envoyScalar(pair.value) === null)) set.add(field.name);
    checkFieldValue(pair.value, field, ctx, where);
  }
  checkRequired(map, type, set, ctx, path);
}

/** The field options by which protoc-gen-validate makes a message field required. */
const REQUIRED_RULES = ['(validate.rules).message.required', '(validate.rules).duration.required', '(validate.rules).any.required'];

/** protoc-gen-validate's presence rules, which Envoy enforces when it loads a config: a required message field
 * set, and one field of a required oneof (xds's RegexMatcher needs google_re2: {}, where Envoy's own does not). */
function checkRequired(map: YAMLMap, type: Type, set: Set<string>, ctx: Ctx, path: string): void {
  const name = type.fullName.slice(1);
  for (const f of type.fieldsArray) {
    // A rule on a member of a oneof holds only when that member is the one set.
    if (!set.has(f.name) && !f.partOf && REQUIRED_RULES.some((r) => f.options?.[r] === true))
      problem(ctx, map, path, `required field ${name}.${f.name} is not set`);
  }
  for (const o of type.oneofsArray) {
    if (o.options?.['(validate.required)'] === true && !o.oneof.some((f) => set.has(f)))
      problem(ctx, map, path, `oneof ${o.name} of ${name} is required: set one of ${o.oneof.join(', ')}`);
  }
}

function checkOneof(field: Field, seen: Map<string, string>, ctx: Ctx, key: YamlNode | null, where: string): void {
  const oneof = field.partOf;
  // proto3 `optional` makes a synthetic oneof of one field; only real ones can be set twice.
  if (!oneof || oneof.oneof.length < 2) return;
  const other = seen.get(oneof.name);
  if (other !== undefined) problem(ctx, key, where, `oneof ${oneof.name}: ${field.name} and ${other} are both set (at most one may be)`);
  else seen.set(oneof.name, field.name);
}

function isDeprecated(options: Record<string, unknown> | undefined): boolean {
  return (
    options?.deprecated === true ||
    options?.['(envoy.annotations.deprecated_at_minor_version)'] !== undefined ||
    options?.['(envoy.annotations.deprecated_at_minor_version_enum)'] !== undefined
  );
}

function since(options: Record<string, unknown> | undefined): string {
  const v = options?.['(envoy.annotations.deprecated_at_minor_version)'] ?? options?.['(envoy.annotations.deprecated_at_minor_version_enum)'];
  return v === undefined ? '' : ` (deprecated at API ${String(v)})`;
}

function suggest(key: string, type: Type): string {
  const close = type.fieldsArray.map((f) => f.name).filter((n) => distance(n, key) <= 2);
  return close.length > 0 ? ` (did you mean ${close.join(' or ')}?)` : '';
}

function distance(a: string, b: string): number {
  const d = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array<number>(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) d[0]![j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      d[i]![j] = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
  }
  return d[a.length]![b.length]!;
}

function checkFieldValue(value: YamlNode | null, field: Field, ctx: Ctx, where: string): void {
  if (value === null || (isScalar(value) && envoyScalar(value) === null)) return; // JSON null: the field stays unset
  if (field.map) {
    if (!isMap(value)) {
      problem(ctx, value, where, `${field.name} is a map: give a mapping`);
      return;
    }
    for (const pair of value.items as Pair<YamlNode, YamlNode>[]) {
      checkSingle(pair.value, field, (field as unknown as MapField).type, ctx, `${where}.${isScalar(pair.key) ? String(pair.key.value) : '?'}`);
    }
    return;
  }
  if (field.repeated) {
    if (!isSeq(value)) {
      problem(ctx, value, where, `${field.name} is repeated: give a list`);
      return;
    }
    value.items.forEach((item, i) => {
      checkSingle(item as YamlNode, field, field.type, ctx, `${where}[${i}]`);
    });
    return;
  }
  checkSingle(value, field, field.type, ctx, where);
}

/** One value of a field (an element, for repeated and map fields). */
function checkSingle(value: YamlNode | null, field: Field, typeName: string, ctx: Ctx, where: string): void {
  const resolved = field.resolvedType;
  if (resolved instanceof protobuf.Enum) {
    checkEnum(value, resolved, ctx, where);
    return;
  }
  if (resolved instanceof protobuf.Type) {
    const full = resolved.fullName.slice(1);
    if (full.startsWith('google.protobuf.')) {
      checkWellKnown(value, full, ctx, where);
      return;
    }
    if (!isMap(value)) {
      problem(ctx, value, where, `${field.name} is a ${full} message: give a mapping`);
      return;
    }
    checkMessage(value, resolved, ctx, where);
    return;
  }
  checkScalar(value, typeName, ctx, where);
  const qualified = `${field.parent!.fullName.slice(1)}.${field.name}`;
  if (isScalar(value) && (CLUSTER_REFS.has(qualified) || qualified === CLUSTER_DEF)) {
    const name = String(envoyScalar(value));
    if (qualified === CLUSTER_DEF) ctx.clustersDefined.add(name);
    else ctx.clustersNamed.push({ name, line: lineOf(ctx, value), path: where });
  }
}

function checkEnum(value: YamlNode | null, e: Enum, ctx: Ctx, where: string): void {
  const v = isScalar(value) ? envoyScalar(value) : undefined;
  const name = typeof v === 'number' ? Object.keys(e.values).find((k) => e.values[k] === v) : typeof v === 'string' && v in e.values ? v : undefined;
  if (name === undefined) {
    problem(ctx, value, where, `${JSON.stringify(v ?? '(not a scalar)')} is not a value of enum ${e.fullName.slice(1)} (${Object.keys(e.values).join(', ')})`);
    return;
  }
  if (isDeprecated(e.valuesOptions?.[name]))
    problem(ctx, value, where, `deprecated enum value ${e.fullName.slice(1)}.${name}${since(e.valuesOptions?.[name])}`);
}

const INT_RANGES: Record<string, [bigint, bigint]> = {
  int32: [-(2n ** 31n), 2n ** 31n - 1n],
  sint32: [-(2n ** 31n), 2n ** 31n - 1n],
  sfixed32: [-(2n ** 31n), 2n ** 31n - 1n],
  uint32: [0n, 2n ** 32n - 1n],
  fixed32: [0n, 2n ** 32n - 1n],
  int64: [-(2n ** 63n), 2n ** 63n - 1n],
  sint64: [-(2n ** 63n), 2n ** 63n - 1n],
  sfixed64: [-(2n ** 63n), 2n ** 63n - 1n],
  uint64: [0n, 2n ** 64n - 1n],
  fixed64: [0n, 2n ** 64n - 1n],
};

/** A scalar field under the proto3 JSON mapping: integers as numbers or digit strings, in range. */
function checkScalar(value: YamlNode | null, type: string, ctx: Ctx, where: string): void {
  const v = isScalar(value) ? envoyScalar(value) : undefined;
  const bad = (want: string): void => problem(ctx, value, where, `${want} expected, got ${describe(value, v)}`);
  if (type === 'string' || type === 'bytes') return void (typeof v !== 'string' && bad('a string'));
  if (type === 'bool') return void (typeof v !== 'boolean' && bad('true or false'));
  if (type === 'double' || type === 'float')
    return void (typeof v !== 'number' && !/^(NaN|-?Infinity|-?\d+(\.\d+)?(e-?\d+)?)$/i.test(String(v)) && bad('a number'));
  const range = INT_RANGES[type];
  if (!range) {
    bad(`a ${type}`);
    return;
  }
  const text = typeof v === 'number' || typeof v === 'string' ? String(v) : '';
  if (!/^-?\d+$/.test(text)) {
    bad(`an integer (${type})`);
    return;
  }
  if (BigInt(text) < range[0] || BigInt(text) > range[1]) bad(`an integer in the ${type} range`);
}

function describe(node: YamlNode | null, v: unknown): string {
  if (isMap(node)) return 'a mapping';
  if (isSeq(node)) return 'a list';
  return `${typeof v} ${JSON.stringify(v)}`;
}

/** Well-known types have their own JSON forms. */
function checkWellKnown(value: YamlNode | null, full: string, ctx: Ctx, where: string): void {
  const short = full.slice('google.protobuf.'.length);
  const v = isScalar(value) ? envoyScalar(value) : undefined;
  if (short in WRAPPERS) {
    if (isMap(value)) {
      problem(ctx, value, where, `${full} is written as a plain ${WRAPPERS[short]} value, not a mapping`);
      return;
    }
    checkScalar(value, WRAPPERS[short]!, ctx, where);
    return;
  }
  if (short === 'Duration') {
    if (typeof v !== 'string' || !/^-?\d+(\.\d{1,9})?s$/.test(v)) {
      problem(ctx, value, where, `a Duration is a string of seconds with an "s", like "0.05s"; got ${describe(value, v)}`);
    }
    return;
  }
  if (short === 'Any') {
    checkAny(value, ctx, where);
    return;
  }
  if (short === 'Struct' || short === 'Empty') return void (!isMap(value) && problem(ctx, value, where, `${full} must be a mapping`));
  if (short === 'ListValue') return void (!isSeq(value) && problem(ctx, value, where, `${full} must be a list`));
  if (short === 'Timestamp' || short === 'FieldMask') return void (typeof v !== 'string' && problem(ctx, value, where, `${full} must be a string`));
  if (short !== 'Value') problem(ctx, value, where, `${full} is not understood by this checker`);
}

/** An Any (typed_config): "@type" names the message, the other keys are its fields. */
function checkAny(value: YamlNode | null, ctx: Ctx, where: string): void {
  if (!isMap(value)) {
    problem(ctx, value, where, 'a typed config must be a mapping with "@type"');
    return;
  }
  const typePair = (value.items as Pair<YamlNode, YamlNode>[]).find((p) => isScalar(p.key) && p.key.value === '@type');
  const url = typePair && isScalar(typePair.value) ? String(typePair.value.value) : undefined;
  if (!url) {
    problem(ctx, value, where, 'a typed config needs "@type"');
    return;
  }
  const name = url.slice(url.lastIndexOf('/') + 1);
  if (!/\.v3(alpha)?\.[A-Z]/.test(name)) {
    problem(ctx, typePair!.value, `${where}.@type`, `"@type" ${url} is not a v3 API message (Envoy has rejected v2 since 1.18)`);
    return;
  }
  const type = ctx.api.message(name);
  if (!type) {
    problem(ctx, typePair!.value, `${where}.@type`, `"@type" ${url}: no such message in Envoy's API`);
    return;
  }
  ctx.report.fieldsSeen.add(`${name} (@type)`);
  checkMessage(value, type, ctx, where, ['@type']);
}

const YAML_CPP_BOOL = new Set(['y', 'yes', 'true', 'on', 'n', 'no', 'false', 'off']);

/** A scalar as Envoy's YAML-to-JSON step types it: quoted means string; otherwise yaml-cpp's booleans
 * (y/yes/true/on/n/no/false/off, in lower, UPPER or Capitalised case), then numbers, then strings. */
export function envoyScalar(node: Scalar): unknown {
  if (node.type !== Scalar.PLAIN) return String(node.value ?? '');
  const src = typeof node.source === 'string' ? node.source : String(node.value);
  const flexibleCase = /^[a-z]*$/.test(src) || /^[A-Z]([a-z]*|[A-Z]*)$/.test(src);
  if (flexibleCase && YAML_CPP_BOOL.has(src.toLowerCase())) return ['y', 'yes', 'true', 'on'].includes(src.toLowerCase());
  if (node.value === null) return null;
  return node.value;
}
