import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { isUtf8 } from 'node:buffer';
import { fileURLToPath } from 'node:url';

/** proto/ sits beside src/ and dist/, so the same relative path works from both. */
export const PROTO_DIR = fileURLToPath(new URL('../../proto', import.meta.url));

export const RLS_SERVICE = 'envoy.service.ratelimit.v3.RateLimitService';
export const HEALTH_SERVICE = 'grpc.health.v1.Health';

/** keepCase: the .proto's snake_case names are used in code; numbers (not strings) for enums and longs are
 * cheaper on the hot path; defaults: absent fields read as their zero values. */
export const LOADER_OPTIONS: protoLoader.Options = {
  keepCase: true,
  longs: Number,
  defaults: true,
  oneofs: true,
  includeDirs: [PROTO_DIR],
};

let cached: protoLoader.PackageDefinition | undefined;

export function packageDefinition(): protoLoader.PackageDefinition {
  cached ??= protoLoader.loadSync(['envoy/service/ratelimit/v3/rls.proto', 'grpc/health/v1/health.proto'], LOADER_OPTIONS);
  return cached;
}

/** The definition a server registers. For the RLS service the request deserializer never throws: grpc-js
 * answers a throwing deserializer with INTERNAL, uncounted, although undecodable bytes are the client's
 * fault; it returns an UndecodableRequest instead, which the handler answers with INVALID_ARGUMENT. */
export function serviceDefinition(name: typeof RLS_SERVICE | typeof HEALTH_SERVICE): grpc.ServiceDefinition {
  const definition = clientConstructor(name).service;
  if (name !== RLS_SERVICE) return definition;
  const method = definition.ShouldRateLimit!;
  const decode = method.requestDeserialize;
  return { ...definition, ShouldRateLimit: { ...method, requestDeserialize: (bytes: Buffer) => decodeRateLimitRequest(bytes, decode) } };
}

/** A client constructor, for tests and tools. */
export function clientConstructor(name: typeof RLS_SERVICE | typeof HEALTH_SERVICE): grpc.ServiceClientConstructor {
  const root = grpc.loadPackageDefinition(packageDefinition());
  return name.split('.').reduce<unknown>((node, part) => (node as Record<string, unknown>)[part], root) as grpc.ServiceClientConstructor;
}

/** What the deserializer hands the handler for bytes that are not a RateLimitRequest. `reason` names the
 * problem and where, never the bytes (they may hold a token). */
export class UndecodableRequest {
  constructor(readonly reason: string) {}
}

function decodeRateLimitRequest(bytes: Buffer, decode: (b: Buffer) => unknown): unknown {
  const problem = checkMessage(bytes, REQUEST, '');
  if (problem) return new UndecodableRequest(problem);
  try {
    return decode(bytes);
  } catch {
    return new UndecodableRequest('not a RateLimitRequest');
  }
}

/** The fields of RateLimitRequest and the messages under it that the check reads: strings are checked for
 * UTF-8, messages walked, numbers checked for wire type and encoding; any other field is skipped as
 * protobuf says. */
interface Field {
  name: string;
  kind: 'string' | 'uint32' | 'uint64' | Schema;
  repeated?: boolean;
}
type Schema = Record<number, Field>;

const ENTRY: Schema = { 1: { name: 'key', kind: 'string' }, 2: { name: 'value', kind: 'string' } };
const OVERRIDE: Schema = { 1: { name: 'requests_per_unit', kind: 'uint32' }, 2: { name: 'unit', kind: 'uint32' } };
const UINT64_VALUE: Schema = { 1: { name: 'value', kind: 'uint64' } };
const DESCRIPTOR: Schema = {
  1: { name: 'entries', kind: ENTRY, repeated: true },
  2: { name: 'limit', kind: OVERRIDE },
  3: { name: 'hits_addend', kind: UINT64_VALUE },
};
const REQUEST: Schema = {
  1: { name: 'domain', kind: 'string' },
  2: { name: 'descriptors', kind: DESCRIPTOR, repeated: true },
  3: { name: 'hits_addend', kind: 'uint32' },
};

const WIRE_VARINT = 0;
const WIRE_FIXED64 = 1;
const WIRE_LEN = 2;
const WIRE_FIXED32 = 5;

/** Walks one message of `schema`; returns the first problem found, or undefined when it is well formed.
 * Stricter than protobufjs, which reads any wire type as the declared one, replaces invalid UTF-8 with
 * U+FFFD (so distinct invalid tokens would share counters), recurses on groups without a bound, and reads
 * 32-bit varints of 6 to 9 bytes as if they had 10: every input it would read differently from this walk
 * is rejected here, so what is checked is what gets decoded. */
function checkMessage(buf: Buffer, schema: Schema, at: string): string | undefined {
  const counts = new Map<number, number>();
  let pos = 0;
  while (pos < buf.length) {
    const tag = readVarint(buf, pos);
    if (!tag || tag.size > 5 || tag.value > 0xffff_ffff) return `${at || 'message'}: malformed field tag at byte ${pos}`;
    const number = Math.floor(tag.value / 8);
    const wire = tag.value % 8;
    if (number === 0) return `${at || 'message'}: field number 0 at byte ${pos}`;
    pos = tag.next;
    const field = schema[number];
    const index = counts.get(number) ?? 0;
    counts.set(number, index + 1);
    const where = field ? `${at}${at ? '.' : ''}${field.name}${field.repeated ? `[${index}]` : ''}` : `${at || 'message'}: field ${number}`;
    const value = readValue(buf, pos, wire);
    if (typeof value === 'string') return `${where}: ${value}`;
    pos = value.next;
    if (!field) continue;
    const problem = checkField(field, wire, value, where);
    if (problem) return problem;
  }
  return undefined;
}

function checkField(field: Field, wire: number, value: Value, where: string): string | undefined {
  const number = field.kind === 'uint32' || field.kind === 'uint64';
  const expected = number ? WIRE_VARINT : WIRE_LEN;
  if (wire !== expected) return `${where}: wire type ${wire}, expected ${expected}`;
  if (field.kind === 'uint32' && (value.size ?? 0) > 5 && value.size !== 10) return `${where}: malformed varint`;
  if (field.kind === 'string' && !isUtf8(value.bytes!)) return `${where}: not valid UTF-8`;
  if (typeof field.kind === 'object') return checkMessage(value.bytes!, field.kind, where);
  return undefined;
}

/** One field's value: where the next field starts, the varint's size, the bytes of a length-delimited
 * one. Groups (wire types 3, 4) are obsolete and absent from these messages. */
interface Value {
  next: number;
  size?: number;
  bytes?: Buffer;
}

function readValue(buf: Buffer, pos: number, wire: number): Value | string {
  if (wire === WIRE_VARINT) return readVarint(buf, pos) ?? 'malformed varint';
  if (wire === WIRE_FIXED64 || wire === WIRE_FIXED32) {
    const next = pos + (wire === WIRE_FIXED64 ? 8 : 4);
    return next <= buf.length ? { next } : 'truncated fixed-size value';
  }
  if (wire !== WIRE_LEN) return `unsupported wire type ${wire}`;
  const len = readVarint(buf, pos);
  if (!len || len.size > 5) return 'malformed length';
  if (len.value > buf.length - len.next) return `declared length ${len.value} exceeds the ${buf.length - len.next} bytes left`;
  return { next: len.next + len.value, bytes: buf.subarray(len.next, len.next + len.value) };
}

/** A varint of at most 10 bytes, as a number (exact up to 2^53, which covers tags and any length that fits
 * in a message), with its size in bytes; undefined when truncated or longer. */
function readVarint(buf: Buffer, pos: number): { value: number; next: number; size: number } | undefined {
  let value = 0;
  let scale = 1;
  for (let i = 0; i < 10 && pos + i < buf.length; i++) {
    const b = buf[pos + i]!;
    value += (b & 0x7f) * scale;
    scale *= 128;
    if ((b & 0x80) === 0) return { value, next: pos + i + 1, size: i + 1 };
  }
  return undefined;
}
