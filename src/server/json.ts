import { overrideCodeOf } from '../config/units.js';
import { InvalidRequestError } from '../errors.js';
import { CODE_NAMES, UNIT_CODE_NAMES, type WireDuration, type WireResponse } from '../response/wire.js';
import type { WireDescriptor, WireRequest } from './request.js';

/** The /json endpoint speaks protobuf's JSON mapping: lowerCamelCase or the .proto's snake_case names in,
 * lowerCamelCase out; enums by name; wrapper values as plain numbers. */

type Json = Record<string, unknown>;

function field(o: Json, snake: string): unknown {
  return o[snake] ?? o[snake.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase())];
}

export function requestFromJson(body: unknown): WireRequest {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw new InvalidRequestError('body must be a JSON object');
  const o = body as Json;
  const descriptors = field(o, 'descriptors') ?? [];
  if (!Array.isArray(descriptors)) throw new InvalidRequestError('descriptors must be a list');
  return {
    domain: asString(field(o, 'domain'), 'domain'),
    hits_addend: asCount(field(o, 'hits_addend') ?? 0, 'hits_addend'),
    descriptors: descriptors.map((d: unknown, i) => descriptorFromJson(d, `descriptors[${i}]`)),
  };
}

function descriptorFromJson(d: unknown, at: string): WireDescriptor {
  if (typeof d !== 'object' || d === null) throw new InvalidRequestError(`${at} must be an object`);
  const o = d as Json;
  const entries = field(o, 'entries') ?? [];
  if (!Array.isArray(entries)) throw new InvalidRequestError(`${at}.entries must be a list`);
  const out: WireDescriptor = {
    entries: entries.map((e: unknown, j) => {
      const eo = (e ?? {}) as Json;
      return { key: asString(eo.key, `${at}.entries[${j}].key`), value: asString(eo.value, `${at}.entries[${j}].value`) };
    }),
  };
  const limit = field(o, 'limit') as Json | undefined;
  if (limit) {
    const unit = field(limit, 'unit');
    out.limit = {
      requests_per_unit: asCount(field(limit, 'requests_per_unit') ?? 0, `${at}.limit.requests_per_unit`),
      unit: typeof unit === 'string' ? overrideCodeOf(unit) : asCount(unit ?? 0, `${at}.limit.unit`),
    };
  }
  const hits = field(o, 'hits_addend');
  if (hits !== undefined && hits !== null) {
    const value = typeof hits === 'object' ? (hits as Json).value : hits;
    out.hits_addend = { value: asCount(value ?? 0, `${at}.hits_addend`) };
  }
  return out;
}

function asString(v: unknown, at: string): string {
  if (v === undefined || v === null) return '';
  if (typeof v !== 'string') throw new InvalidRequestError(`${at} must be a string`);
  return v;
}

function asCount(v: unknown, at: string): number {
  const n = typeof v === 'string' && v.trim() !== '' ? Number(v) : v;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 0) throw new InvalidRequestError(`${at} must be a whole number`);
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
  return out;
}
