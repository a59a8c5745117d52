/** RateLimitRequests for the fuzzers, valid and invalid, every string field carrying the marker, and an
 * oracle for what the contract says about each: decided (OK or OVER_LIMIT) or INVALID_ARGUMENT. The oracle
 * is written from docs/operations.md's contract, not from src/rls/request.ts, so it can disagree with it. */
import type { RequestBounds } from '../../src/rls/request.js';
import type { RlsDescriptor, RlsEntry, RlsRequest } from '../helpers/service.js';
import type { Rng } from './fuzz-lib.js';

export const MAX_UINT32 = 2 ** 32 - 1;

const bytes = (s: string): number => Buffer.byteLength(s);

/** Text holding the marker: plain, as a bearer token, unique (its own counters), non-ASCII, or exactly at
 * the length bound (`max` bytes). */
export function markerText(r: Rng, marker: string, max: number): string {
  switch (r.int(6)) {
    case 0:
      return marker;
    case 1:
      return `Bearer ${marker}`;
    case 2:
      return `${marker}-${r.int(1_000_000)}`;
    case 3:
      return `é${marker}😀\u0000${r.int(1000)}`;
    case 4:
      return `${marker}${'x'.repeat(Math.max(0, max - bytes(marker)))}`;
    default:
      return `${'/'.repeat(r.int(3))}${marker}%2F..%00${r.int(100)}`;
  }
}

function entries(r: Rng, domain: string, marker: string, max: number): RlsEntry[] {
  const text = (): string => markerText(r, marker, max);
  const out: RlsEntry[] = [];
  if (domain === 'property-api') {
    out.push({ key: 'category', value: r.chance(0.8) ? r.pick(['read', 'write', 'reports']) : text() });
    if (r.chance(0.8)) out.push({ key: 'token', value: text() });
  } else if (domain === 'fuzz') {
    const key = r.pick(['path', 'path', 'shadowed', 'sliding', 'free']);
    out.push({ key, value: r.pick([`/api/${marker}`, `/${marker}`, text()]) });
    if (r.chance(0.6)) out.push({ key: 'token', value: text() });
  } else {
    out.push({ key: text(), value: text() });
  }
  // A key the config does not know, anywhere: a client can put a token anywhere.
  if (r.chance(0.25)) out.splice(r.int(out.length + 1), 0, { key: text(), value: text() });
  return out;
}

function descriptor(r: Rng, domain: string, marker: string, max: number): RlsDescriptor {
  const d: RlsDescriptor = { entries: entries(r, domain, marker, max) };
  if (r.chance(0.2)) d.limit = { requests_per_unit: r.pick([0, 1, 7, 1000, MAX_UINT32]), unit: r.between(1, 6) };
  if (r.chance(0.15)) d.hits_addend = { value: r.pick([0, 1, 3, MAX_UINT32]) };
  // Envoy 1.38's refunds: given back, never refused, whatever else the request holds.
  if (r.chance(0.1)) d.is_negative_hits = true;
  return d;
}

/** A request the contract accepts. */
export function validRequest(r: Rng, marker: string, bounds: RequestBounds): RlsRequest {
  const max = bounds.maxValueBytes;
  const domain = r.pick(['property-api', 'property-api', 'fuzz', markerText(r, marker, max)]);
  const count = r.between(1, Math.min(4, bounds.maxDescriptors));
  return {
    domain,
    descriptors: Array.from({ length: count }, () => descriptor(r, domain, marker, max)),
    hits_addend: r.pick([0, 0, 0, 1, 5, MAX_UINT32]),
  };
}

/** One way to break the contract, applied to a valid request. */
export function invalidRequest(r: Rng, marker: string, bounds: RequestBounds): { request: RlsRequest; kind: string } {
  const req = validRequest(r, marker, bounds);
  const max = bounds.maxValueBytes;
  const d = r.pick(req.descriptors);
  const over = `${marker}${r.pick(['y', 'é', '😀'])}`.padEnd(max + 1, r.pick(['z', 'ü']));
  const breakers: [string, () => void][] = [
    ['empty domain', () => (req.domain = '')],
    ['long domain', () => (req.domain = over)],
    ['no descriptors', () => (req.descriptors = [])],
    ['too many descriptors', () => (req.descriptors = Array.from({ length: bounds.maxDescriptors + 1 + r.int(5) }, () => d))],
    ['no entries', () => (d.entries = [])],
    ['too many entries', () => (d.entries = Array.from({ length: bounds.maxEntries + 1 + r.int(5) }, () => ({ key: marker, value: marker })))],
    ['empty key', () => d.entries.push({ key: '', value: markerText(r, marker, max) })],
    ['long key', () => d.entries.push({ key: over, value: marker })],
    ['long value', () => d.entries.push({ key: r.pick(['token', marker]), value: over })],
    ['long value in emoji', () => d.entries.push({ key: 'token', value: `${marker}${'😀'.repeat(Math.ceil(max / 4))}` })],
    ['bad unit', () => (d.limit = { requests_per_unit: 1, unit: r.pick([0, 7, 8, 1000]) })],
    ['descriptor hits past uint32', () => (d.hits_addend = { value: r.pick([2 ** 32, 2 ** 40, 2 ** 52]) })],
  ];
  const [kind, apply] = r.pick(breakers);
  apply();
  return { request: req, kind };
}

/** The contract (docs/operations.md, "Bad input"), independently of the code under test. */
export function contractAccepts(req: RlsRequest, bounds: RequestBounds): boolean {
  const max = bounds.maxValueBytes;
  if (req.domain === '' || bytes(req.domain) > max) return false;
  if (req.descriptors.length === 0 || req.descriptors.length > bounds.maxDescriptors) return false;
  return req.descriptors.every((d) => {
    if (d.entries.length === 0 || d.entries.length > bounds.maxEntries) return false;
    if (d.entries.some((e) => e.key === '' || bytes(e.key) > max || bytes(e.value) > max)) return false;
    if (d.limit && !(typeof d.limit.unit === 'number' && d.limit.unit >= 1 && d.limit.unit <= 6)) return false;
    return !d.hits_addend || d.hits_addend.value <= MAX_UINT32;
  });
}
