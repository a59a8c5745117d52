import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import protobuf from 'protobufjs';
import { stringify } from 'yaml';
import { ConfigError, type ConfigProblem, fileProblem } from './errors.js';
import type { ConfigLimits, ConfigSource } from './load.js';
import { applyOverlay, type ConfigDoc, type Overlay, type OverlayEntry } from './overlay.js';

/** The xDS type of envoyproxy/ratelimit's descriptor config (its api/ratelimit/config/ratelimit/v3/rls_conf.proto),
 * the one Envoy Gateway serves to a rate-limit service started with CONFIG_TYPE=GRPC_XDS_SOTW. */
export const RLS_CONFIG_TYPE_URL = 'type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig';

/** One resource of a DiscoveryResponse: a google.protobuf.Any. */
export interface XdsResource {
  typeUrl: string;
  value: Uint8Array;
}

/** Most resources one response may carry (Envoy Gateway serves one per domain). */
export const MAX_RESOURCES = 10_000;
/** Descriptors nested deeper can never match: a request descriptor holds a bounded number of entries. */
const MAX_DEPTH = 64;
/** Names and type URLs come from the management server; shown bounded and printable. */
const MAX_SHOWN = 120;

const PROTO_DIR = fileURLToPath(new URL('../../proto', import.meta.url));
let configType: protobuf.Type | undefined;

function rateLimitConfigType(): protobuf.Type {
  if (!configType) {
    const root = new protobuf.Root();
    // google/protobuf/*.proto are protobufjs's own copies; the rest are Tollgate's proto/ subsets.
    root.resolvePath = (_origin, target) => join(PROTO_DIR, target);
    root.loadSync('ratelimit/config/ratelimit/v3/rls_conf.proto', { keepCase: true });
    configType = root.lookupType('ratelimit.config.ratelimit.v3.RateLimitConfig');
  }
  return configType;
}

/** A management-server string as a log line or NACK may show it: printable, bounded. */
export function shown(text: string): string {
  // Cut before cleaning: a 1 MiB version costs a 120-character copy, not a second megabyte (issue 36, item 10).
  const clean = text.slice(0, MAX_SHOWN).replace(/[^\x20-\x7e]/g, '?');
  return text.length > MAX_SHOWN ? `${clean}… (${text.length} characters)` : clean;
}

/** Each resource as the YAML file envoyproxy/ratelimit would have made of it (its src/config/config_xds.go
 * turns the proto into its YAML structure and loads that): the same validation as files then runs on it, so
 * an xDS-fed config is held to exactly what a file is. Throws ConfigError listing every resource that is not
 * a RateLimitConfig, does not decode, nests too deep or is larger than a config file may be. */
export function xdsSources(resources: readonly XdsResource[], limits: ConfigLimits, overlay?: Overlay, missed: OverlayEntry[] = []): ConfigSource[] {
  const problems: ConfigProblem[] = [];
  if (resources.length > MAX_RESOURCES)
    throw new ConfigError([fileProblem('xDS response', 'TOO_MANY', `${resources.length} resources, more than the maximum of ${MAX_RESOURCES}`)]);
  const sources: ConfigSource[] = [];
  let total = 0;
  resources.forEach((r, i) => {
    const source = xdsSource(r, i, limits, problems, (doc) => overlay && missed.push(...applyOverlay(doc, overlay)));
    if (!source) return;
    total += Buffer.byteLength(source.text);
    sources.push(source);
  });
  if (total > limits.maxDirBytes)
    problems.push(
      fileProblem(
        'xDS response',
        'TOO_LARGE',
        `the resources add up to ${total} bytes of config, more than the maximum of ${limits.maxDirBytes} (4 × --max-config-bytes)`,
      ),
    );
  if (problems.length > 0) throw new ConfigError(problems);
  return sources;
}

/** `overlaid`: writes the overlay's keys (XDS_OVERLAY_FILE, overlay.ts) into the resource before it is validated. */
function xdsSource(
  r: XdsResource,
  index: number,
  limits: ConfigLimits,
  problems: ConfigProblem[],
  overlaid: (doc: ConfigDoc) => void,
): ConfigSource | undefined {
  const at = `xDS resource #${index}`;
  if (r.typeUrl !== RLS_CONFIG_TYPE_URL) {
    problems.push(fileProblem(at, 'WRONG_TYPE', `has type "${shown(r.typeUrl)}", not ${RLS_CONFIG_TYPE_URL}`));
    return undefined;
  }
  let config: Record<string, unknown>;
  try {
    const type = rateLimitConfigType();
    config = type.toObject(type.decode(r.value), { enums: String, longs: Number, arrays: true, defaults: true });
  } catch (err) {
    problems.push(fileProblem(at, 'UNDECODABLE', `is not a RateLimitConfig message (${(err as Error).message.slice(0, MAX_SHOWN)})`));
    return undefined;
  }
  const name = String(config.name);
  const file = name === '' ? at : `${at} "${shown(name)}"`;
  const descriptors = config.descriptors as Descriptor[];
  if (depthOf(descriptors) > MAX_DEPTH) {
    problems.push(fileProblem(file, 'TOO_DEEP', `descriptors nested more than ${MAX_DEPTH} levels deep`));
    return undefined;
  }
  const doc: ConfigDoc = { domain: String(config.domain), descriptors: descriptors.map(yamlDescriptor) };
  overlaid(doc);
  const text = stringify(doc, { lineWidth: 0 });
  if (Buffer.byteLength(text) > limits.maxFileBytes) {
    problems.push(
      fileProblem(
        file,
        'TOO_LARGE',
        `${Buffer.byteLength(text)} bytes of config, more than the maximum of ${limits.maxFileBytes} per resource (--max-config-bytes)`,
      ),
    );
    return undefined;
  }
  return { file, text };
}

interface Descriptor {
  key: string;
  value: string;
  rate_limit?: Policy | null;
  descriptors: Descriptor[];
  shadow_mode: boolean;
  detailed_metric: boolean;
  quota_mode: boolean;
  metadata?: StructValue | null;
}

interface Policy {
  unit: string;
  requests_per_unit: number;
  unlimited: boolean;
  name: string;
  replaces: { name: string }[];
}

function depthOf(list: readonly Descriptor[], depth = 1): number {
  let deepest = list.length > 0 ? depth : depth - 1;
  for (const d of list) {
    if (deepest > MAX_DEPTH) break;
    deepest = Math.max(deepest, depthOf(d.descriptors, depth + 1));
  }
  return deepest;
}

/** A descriptor as envoyproxy/ratelimit's YAML writes it: an empty string is an absent field there (a key-only
 * descriptor has value ""), and false booleans are the defaults. */
function yamlDescriptor(d: Descriptor): Record<string, unknown> {
  const out: Record<string, unknown> = { key: d.key };
  if (d.value !== '') out.value = d.value;
  if (d.rate_limit) out.rate_limit = yamlPolicy(d.rate_limit);
  if (d.shadow_mode) out.shadow_mode = true;
  if (d.detailed_metric) out.detailed_metric = true;
  if (d.quota_mode) out.quota_mode = true;
  if (d.metadata) out.metadata = structToJson(d.metadata);
  if (d.descriptors.length > 0) out.descriptors = d.descriptors.map(yamlDescriptor);
  return out;
}

/** UNKNOWN, the enum's zero, is an unset unit: allowed beside unlimited (as envoyproxy/ratelimit's
 * config_impl.go allows it), an invalid unit otherwise, which validation reports. */
function yamlPolicy(p: Policy): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (!p.unlimited || p.unit !== 'UNKNOWN') out.unit = p.unit;
  if (!p.unlimited || p.requests_per_unit !== 0) out.requests_per_unit = p.requests_per_unit;
  if (p.unlimited) out.unlimited = true;
  if (p.name !== '') out.name = p.name;
  if (p.replaces.length > 0) out.replaces = p.replaces.map((r) => ({ name: r.name }));
  return out;
}

interface StructValue {
  fields?: Record<string, ValueKind>;
}
interface ValueKind {
  nullValue?: unknown;
  numberValue?: number;
  stringValue?: string;
  boolValue?: boolean;
  structValue?: StructValue;
  listValue?: { values?: ValueKind[] };
}

/** google.protobuf.Struct as the JSON it stands for. protobufjs decodes it as its messages, with its own copy of
 * struct.proto, whose field names are camelCase whatever keepCase says. */
function structToJson(s: StructValue): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(s.fields ?? {})) out[k] = valueToJson(v);
  return out;
}

function valueToJson(v: ValueKind): unknown {
  if (v.structValue) return structToJson(v.structValue);
  if (v.listValue) return (v.listValue.values ?? []).map(valueToJson);
  if (v.stringValue !== undefined && v.stringValue !== null) return v.stringValue;
  if (v.numberValue !== undefined && v.numberValue !== null) return v.numberValue;
  if (v.boolValue !== undefined && v.boolValue !== null) return v.boolValue;
  return null;
}
