import type { Metadata, MetadataValue } from '../config/spec.js';
import { cachedFingerprint } from '../fingerprint.js';
import type { Decision, DecisionInput } from '../limiter/limiter.js';
import { passedBackends } from './passed-backends.js';

/** RESPONSE_DYNAMIC_METADATA: the response's dynamic_metadata, shaped as envoyproxy/ratelimit's
 * ratelimitToMetadata builds it (src/service/ratelimit.go): the domain, the request's descriptors (entries as
 * `key=value`, Envoy's limit, hitsAddend), the request's hitsAddend when set, and the `metadata` of every
 * descriptor that passed with a limit, merged (the first written wins, mappings merged key by key), and the
 * backends still under quota (passed-backends.ts).
 *
 * One difference, on purpose: Envoy may write dynamic metadata to its access log, and descriptor values hold
 * tokens, so a value appears as its fingerprint (`key=fp:<hex>`), a key the matched rule does not name as
 * one too, and an unknown domain as its fingerprint. Config text (configured domains, rule keys, metadata)
 * appears as written. */

/** google.protobuf.Struct as @grpc/proto-loader encodes it: protobufjs's own definition of the well-known
 * types names the Value fields in camelCase, whatever keepCase says. */
export interface WireStruct {
  fields: Record<string, WireValue>;
}

export type WireValue =
  | { nullValue: 0 }
  | { numberValue: number }
  | { stringValue: string }
  | { boolValue: boolean }
  | { structValue: WireStruct }
  | { listValue: { values: WireValue[] } };

export function dynamicMetadata(input: DecisionInput, requestHits: number, d: Decision): WireStruct {
  const out: Metadata = {
    domain: d.domain?.name ?? `fp:${cachedFingerprint(input.domain)}`,
    descriptors: input.descriptors.map((desc, i) => {
      const keys = d.descriptors[i]?.rule?.keys;
      const item: Metadata = {
        entries: desc.entries.map((e, at) => `${keys?.[at] === e.key ? e.key : `fp:${cachedFingerprint(e.key)}`}=fp:${cachedFingerprint(e.value)}`),
      };
      if (desc.override) item.limit = `requests_per_unit:${desc.override.requestsPerUnit} unit:${desc.override.unit.toUpperCase()}`;
      if (desc.hits !== undefined) item.hitsAddend = desc.hits;
      return item;
    }),
  };
  if (requestHits !== 0) out.hitsAddend = requestHits;
  const passed: Metadata = Object.create(null) as Metadata;
  d.descriptors.forEach((o, i) => {
    const status = o.over && !o.shadowStatus ? 'OVER_LIMIT' : 'OK';
    if (status === 'OK' && o.windows.length > 0 && !input.descriptors[i]!.override && o.rule?.metadata) merge(passed, o.rule.metadata);
  });
  if (Object.keys(passed).length > 0) out.metadata = passed;
  const backends = passedBackends(input, d);
  if (backends) out.passedBackends = backends;
  return toStruct(out);
}

/** envoyproxy/ratelimit's mergeMetadata: a key already present is kept, unless both sides are mappings,
 * which are merged. Mappings here have no prototype: config keys such as `__proto__` or `constructor` are
 * plain keys, never Object.prototype's. */
function merge(into: Metadata, from: Metadata): void {
  for (const [k, v] of Object.entries(from)) {
    const mine = Object.hasOwn(into, k) ? into[k] : undefined;
    if (mine === undefined) into[k] = copy(v);
    else if (isMapping(mine) && isMapping(v)) merge(mine, v);
  }
}

function copy(v: MetadataValue): MetadataValue {
  if (Array.isArray(v)) return v.map(copy);
  if (!isMapping(v)) return v;
  const out = Object.create(null) as Metadata;
  for (const [k, x] of Object.entries(v)) out[k] = copy(x);
  return out;
}

const isMapping = (v: MetadataValue | undefined): v is Metadata => typeof v === 'object' && v !== null && !Array.isArray(v);

export function toStruct(m: Metadata): WireStruct {
  const fields = Object.create(null) as Record<string, WireValue>;
  for (const [k, v] of Object.entries(m)) fields[k] = toValue(v);
  return { fields };
}

function toValue(v: MetadataValue): WireValue {
  if (v === null) return { nullValue: 0 };
  if (typeof v === 'number') return { numberValue: v };
  if (typeof v === 'string') return { stringValue: v };
  if (typeof v === 'boolean') return { boolValue: v };
  if (Array.isArray(v)) return { listValue: { values: v.map(toValue) } };
  return { structValue: toStruct(v) };
}

/** A Struct as protobuf's JSON mapping writes it: plain JSON (for the /json endpoint). */
export function structToJson(s: WireStruct): Metadata {
  const out = Object.create(null) as Metadata;
  for (const [k, v] of Object.entries(s.fields)) out[k] = valueToJson(v);
  return out;
}

function valueToJson(v: WireValue): MetadataValue {
  if ('nullValue' in v) return null;
  if ('numberValue' in v) return v.numberValue;
  if ('stringValue' in v) return v.stringValue;
  if ('boolValue' in v) return v.boolValue;
  if ('listValue' in v) return v.listValue.values.map(valueToJson);
  return structToJson(v.structValue);
}
