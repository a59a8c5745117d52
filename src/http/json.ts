import { MAX_UINT32, overrideCodeOf } from '../config/units.js';
import { InvalidRequestError } from '../errors.js';
import { structToJson } from '../response/metadata.js';
import { CODE_NAMES, UNIT_CODE_NAMES, type WireDuration, type WireResponse } from '../response/wire.js';
import type { WireDescriptor, WireRequest } from '../rls/request.js';

/** The /json endpoint speaks protobuf's JSON mapping: lowerCamelCase or the .proto's snake_case names in,
 * lowerCamelCase out; enums by name; wrapper values as plain numbers. */

type Json = Record<string, unknown>;

function field(o: Json, snake: string): unknown {
  return o[snake] ?? o[snake.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase())];
}

export function requestFromJson(body: unknown): WireRequest {
  if (!isObject(body)) throw new InvalidRequestError('body must be a JSON object');
  const descriptors = field(body, 'descriptors') ?? [];
  if (!Array.isArray(descriptors)) throw new InvalidRequestError('descriptors must be a list');
  return {
    domain: asString(field(body, 'domain'), 'domain'),
    hits_addend: asUint32(field(body, 'hits_addend') ?? 0, 'hits_addend'),
    descriptors: descriptors.map((d: unknown, i) => descriptorFromJson(d, `descriptors[${i}]`)),
  };
}

function isObject(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function descriptorFromJson(d: unknown, at: string): WireDescriptor {
  if (!isObject(d)) throw new InvalidRequestError(`${at} must be an object`);
  const entries = field(d, 'entries') ?? [];
  if (!Array.isArray(entries)) throw new InvalidRequestError(`${at}.entries must be a list`);
  const out: WireDescriptor = {
    entries: entries.map((e: unknown, j) => {
      if (!isObject(e)) throw new InvalidRequestError(`${at}.entries[${j}] must be an object`);
      return { key: asString(e.key, `${at}.entries[${j}].key`), value: asString(e.value, `${at}.entries[${j}].value`) };
    }),
  };
  const limit = field(d, 'limit');
  if (limit !== undefined && limit !== null) {
    if (!isObject(limit)) throw new InvalidRequestError(`${at}.limit must be an object`);
    const unit = field(limit, 'unit');
    out.limit = {
      requests_per_unit: asUint32(field(limit, 'requests_per_unit') ?? 0, `${at}.limit.requests_per_unit`),
      unit: typeof unit === 'string' ? overrideCodeOf(unit) : asUint32(unit ?? 0, `${at}.limit.unit`),
    };
  }
  const hits = field(d, 'hits_addend');
  if (hits !== undefined && hits !== null) {
    const value = isObject(hits) ? hits.value : hits;
    out.hits_addend = { value: asUint32(value ?? 0, `${at}.hits_addend`) };
  }
  const negative = field(d, 'is_negative_hits');
  if (negative !== undefined && negative !== null) {
    if (typeof negative !== 'boolean') throw new InvalidRequestError(`${at}.is_negative_hits must be true or false`);
    out.is_negative_hits = negative;
  }
  return out;
}

/** Lone UTF-16 surrogates: such a string has no UTF-8 form, and hashing it would replace them with U+FFFD,
 * so distinct invalid tokens would share one counter. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

function asString(v: unknown, at: string): string {
  if (v === undefined || v === null) return '';
  if (typeof v !== 'string') throw new InvalidRequestError(`${at} must be a string`);
  if (LONE_SURROGATE.test(v)) throw new InvalidRequestError(`${at} is not valid Unicode (a lone surrogate)`);
  return v;
}

/** A uint32 as protobuf JSON writes it: a JSON number or a string of decimal digits, whole, from 0 to
 * 4294967295. Anything else ("0x10", 1e300, 1.5, -1, " 7") is refused rather than reinterpreted. */
function asUint32(v: unknown, at: string): number {
  const n = typeof v === 'string' && /^(0|[1-9][0-9]{0,9})$/.test(v) ? Number(v) : v;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 0 || n > MAX_UINT32) {
    throw new InvalidRequestError(`${at} must be a whole number from 0 to ${MAX_UINT32}`);
  }
  return n;
}

function durationJson(d: WireDuration): string {
  return `${d.seconds + d.nanos / 1e9}s`;
}

export function responseToJson(r: WireResponse): Json {
  const out: Json = {
    overallCode: CODE_NAMES[r.overall_code],
    statuses: r.statuses.map((s) => ({
      code: CODE_NAMES[s.code],
      ...(s.current_limit && {
        currentLimit: {
          name: s.current_limit.name,
          requestsPerUnit: s.current_limit.requests_per_unit,
          unit: UNIT_CODE_NAMES[s.current_limit.unit],
        },
      }),
      limitRemaining: s.limit_remaining,
      ...(s.duration_until_reset && { durationUntilReset: durationJson(s.duration_until_reset) }),
    })),
    responseHeadersToAdd: r.response_headers_to_add,
  };
  if (r.raw_body) out.rawBody = r.raw_body.toString('base64');
  if (r.dynamic_metadata) out.dynamicMetadata = structToJson(r.dynamic_metadata);
  return out;
}
