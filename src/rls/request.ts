import { MAX_UINT32, unitFromOverrideCode } from '../config/units.js';
import { InvalidRequestError } from '../errors.js';
import type { DecisionInput, DescriptorInput } from '../limiter/limiter.js';

/** RateLimitRequest as @grpc/proto-loader decodes it (keepCase, defaults, longs as numbers). */
export interface WireRequest {
  domain: string;
  descriptors: WireDescriptor[];
  hits_addend: number;
}

export interface WireDescriptor {
  entries: { key: string; value: string }[];
  limit?: { requests_per_unit: number; unit: number } | null;
  hits_addend?: { value: number } | null;
  /** Envoy 1.38+: the descriptor's hits are a refund (given back), not a charge. */
  is_negative_hits?: boolean;
}

export interface RequestBounds {
  maxDescriptors: number;
  maxEntries: number;
  /** Longest key or value, in UTF-8 bytes. */
  maxValueBytes: number;
}

export const defaultBounds: RequestBounds = {
  maxDescriptors: 64,
  maxEntries: 32,
  // Above Envoy's default (and the shipped envoy.yaml's) max_request_headers_kb of 60: no header value Envoy
  // forwards can be refused for its length, since a refusal lets the request through (failure_mode_deny: false).
  maxValueBytes: 64 * 1024,
};

const MAX_HITS = MAX_UINT32;

/** Checks a request against the contract and the bounds; the messages say what is wrong and where, and
 * never echo a value (it may be a token). */
export function toDecisionInput(req: WireRequest, bounds: RequestBounds): DecisionInput {
  if (!req.domain) bad('domain is empty');
  if (tooLong(req.domain, bounds.maxValueBytes)) bad(`domain is longer than ${bounds.maxValueBytes} bytes`);
  const list = req.descriptors ?? [];
  if (list.length === 0) bad('no descriptors: a request needs at least one');
  if (list.length > bounds.maxDescriptors) bad(`${list.length} descriptors, more than the maximum of ${bounds.maxDescriptors}`);
  const descriptors = new Array<DescriptorInput>(list.length);
  for (let i = 0; i < list.length; i++) descriptors[i] = toDescriptor(list[i]!, i, bounds);
  return { domain: req.domain, hits: req.hits_addend > 0 ? req.hits_addend : 1, descriptors };
}

function bad(msg: string): never {
  throw new InvalidRequestError(msg);
}

/** Checks one descriptor. Its entries are used as decoded (the decoders make fresh {key, value} objects of
 * strings); messages are built only on failure. */
function toDescriptor(d: WireDescriptor, i: number, bounds: RequestBounds): DescriptorInput {
  const entries = d.entries ?? [];
  if (entries.length === 0) bad(`descriptors[${i}] has no entries`);
  if (entries.length > bounds.maxEntries) bad(`descriptors[${i}] has ${entries.length} entries, more than the maximum of ${bounds.maxEntries}`);
  for (let j = 0; j < entries.length; j++) {
    const e = entries[j]!;
    if (!e.key) bad(`descriptors[${i}].entries[${j}] has an empty key`);
    if (tooLong(e.key, bounds.maxValueBytes)) bad(`descriptors[${i}].entries[${j}]: key is longer than ${bounds.maxValueBytes} bytes`);
    if (typeof e.value !== 'string') e.value = '';
    if (tooLong(e.value, bounds.maxValueBytes)) {
      bad(`descriptors[${i}].entries[${j}]: value is ${Buffer.byteLength(e.value)} bytes, more than the maximum of ${bounds.maxValueBytes}`);
    }
  }
  const out: DescriptorInput = { entries };
  if (d.limit) {
    const unit = unitFromOverrideCode(d.limit.unit);
    if (!unit) bad(`descriptors[${i}].limit.unit must be SECOND, MINUTE, HOUR, DAY, MONTH or YEAR (got ${d.limit.unit})`);
    out.override = { requestsPerUnit: d.limit.requests_per_unit, unit: unit! };
  }
  if (d.hits_addend) {
    const hits = Number(d.hits_addend.value);
    if (!Number.isInteger(hits) || hits < 0 || hits > MAX_HITS) bad(`descriptors[${i}].hits_addend must be a whole number from 0 to ${MAX_HITS}`);
    out.hits = hits;
  }
  if (d.is_negative_hits === true) out.refund = true;
  return out;
}

/** UTF-8 length over `max`. A UTF-16 unit is 1 to 3 UTF-8 bytes, so most strings are decided without
 * encoding them. */
export function tooLong(s: string, max: number): boolean {
  if (s.length > max) return true;
  return s.length * 3 > max && Buffer.byteLength(s) > max;
}
