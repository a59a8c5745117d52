import { describe, expect, it } from 'vitest';
import type { WireResponse } from '../../src/response/wire.js';
import { decodeRateLimitRequest, encodeRateLimitResponse, UndecodableRequest } from '../../src/rls/rls-codec.js';
import { bound } from '../../src/rls/rls-encode.js';
import { clientConstructor, RLS_SERVICE } from '../../src/server/proto.js';
import { Rng } from '../adversarial/fuzz-lib.js';

/** protobufjs, through @grpc/proto-loader with Tollgate's options: the reference both directions must match. */
const reference = clientConstructor(RLS_SERVICE).service.ShouldRateLimit!;
const SEED = Number(process.env.CODEC_SEED ?? 20261122);

/** The fuzz library's seeded generator, as a function. */
function prng(seed: number): () => number {
  const rng = new Rng(seed);
  return () => rng.next();
}

function generators(random: () => number) {
  const int = (max: number): number => Math.floor(random() * max);
  const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)]!;
  // 'x'.repeat(64): the longest string the encoder writes in JS (rls-encode.ts SHORT).
  const ALPHABET = ['a', 'Z', '0', '-', ' ', 'é', '€', '😀', 'Bearer ', '/', '\u0000', 'x'.repeat(64), 'x'.repeat(130)];
  const text = (): string => Array.from({ length: int(6) }, () => pick(ALPHABET)).join('');
  // Every varint length's first and last value a uint32 holds.
  const number = (): number =>
    pick([0, 1, 127, 128, 300, 16_383, 16_384, 2 ** 21 - 1, 2 ** 21, 2 ** 28 - 1, 2 ** 28, 2 ** 31 - 1, 2 ** 31, 2 ** 32 - 1, int(1e6)]);
  /** An int64 field's (a Duration's seconds): past 2^32, up to 7 bytes. */
  const long = (): number => pick([number(), 2 ** 35 - 1, 2 ** 35, 2 ** 42 - 1, 2 ** 42 + int(1e6)]);
  return { int, pick, text, number, long };
}

function randomRequest(random: () => number): Record<string, unknown> {
  const { int, text, number } = generators(random);
  const req: Record<string, unknown> = { domain: text(), descriptors: [] as unknown[] };
  if (random() < 0.5) req.hits_addend = number();
  for (let i = int(4); i > 0; i--) {
    const d: Record<string, unknown> = { entries: Array.from({ length: int(4) }, () => ({ key: text(), value: text() })) };
    if (random() < 0.3) d.limit = { requests_per_unit: number(), unit: int(8) };
    if (random() < 0.3) d.hits_addend = { value: random() < 0.5 ? number() : 2 ** 40 + int(1e6) };
    (req.descriptors as unknown[]).push(d);
  }
  return req;
}

function randomResponse(random: () => number): WireResponse {
  const { int, text, number, long } = generators(random);
  const headers = () => Array.from({ length: int(4) }, () => ({ key: text(), value: text() }));
  const res: WireResponse = {
    overall_code: int(3),
    statuses: Array.from({ length: int(4) }, () => ({
      code: int(3),
      limit_remaining: number(),
      ...(random() < 0.7 ? { current_limit: { name: text(), requests_per_unit: number(), unit: int(8) } } : {}),
      ...(random() < 0.7 ? { duration_until_reset: { seconds: long(), nanos: int(1e9) } } : {}),
    })),
    response_headers_to_add: headers(),
    request_headers_to_add: headers(),
  };
  if (random() < 0.3) res.raw_body = Buffer.from(text());
  return res;
}

/** Whether every string in a decoded request is well-formed (no escaped non-UTF-8 bytes). */
function wellFormed(x: unknown): boolean {
  if (typeof x === 'string') return x.isWellFormed();
  if (x && typeof x === 'object') return Object.values(x).every(wellFormed);
  return true;
}

/** Flips, truncates, inserts or duplicates bytes. */
function mutate(bytes: Buffer, random: () => number): Buffer {
  const { int } = generators(random);
  const b = Buffer.from(bytes);
  const kind = int(4);
  if (kind === 0 && b.length) b[int(b.length)] = int(256);
  if (kind === 1) return b.subarray(0, int(b.length + 1));
  if (kind === 2) {
    const at = int(b.length + 1);
    return Buffer.concat([b.subarray(0, at), Buffer.from([int(256), int(256)]), b.subarray(at)]);
  }
  if (kind === 3) return Buffer.concat([b, b.subarray(int(b.length + 1))]);
  return b;
}

describe(`RLS codec against protobufjs (seed ${SEED})`, () => {
  it('decodes 3,000 random requests exactly as protobufjs does', () => {
    const random = prng(SEED);
    for (let i = 0; i < 3000; i++) {
      const bytes = reference.requestSerialize(randomRequest(random));
      expect(decodeRateLimitRequest(bytes)).toEqual(reference.requestDeserialize(bytes));
    }
  });

  it('reads every mutated request it accepts exactly as protobufjs, and rejects what protobufjs cannot read', () => {
    const random = prng(SEED + 1);
    let rejected = 0;
    for (let i = 0; i < 5000; i++) {
      const bytes = mutate(reference.requestSerialize(randomRequest(random)), random);
      const mine = decodeRateLimitRequest(bytes);
      let theirs: unknown;
      try {
        theirs = reference.requestDeserialize(bytes);
      } catch {
        theirs = undefined;
      }
      if (mine instanceof UndecodableRequest) {
        rejected++;
        continue;
      }
      expect(theirs, `case ${i}`).toBeDefined();
      // Bytes that are not UTF-8 are kept distinct here where protobufjs writes U+FFFD: compare the rest.
      if (!wellFormed(mine)) continue;
      expect(mine, `case ${i}`).toEqual(theirs);
    }
    expect(rejected).toBeGreaterThan(100);
  });

  it('keeps strings that are not UTF-8 distinct (protobufjs turns them all into U+FFFD)', () => {
    const request = (value: number[]): Buffer => {
      const entry = Buffer.from([0x12, value.length, ...value]);
      const descriptor = Buffer.concat([Buffer.from([0x0a, entry.length]), entry]);
      return Buffer.concat([Buffer.from([0x0a, 0x01, 0x64, 0x12, descriptor.length]), descriptor]);
    };
    const value = (bytes: number[]): string =>
      (decodeRateLimitRequest(request(bytes)) as { descriptors: { entries: { value: string }[] }[] }).descriptors[0]!.entries[0]!.value;
    expect(value([0x61, 0xc3, 0x28])).toBe('a\udcc3(');
    expect(value([0xff])).not.toBe(value([0xfe]));
    expect(value([0xc3, 0xa9])).toBe('é');
  });

  it('rejects wrong wire types, groups and bad tags, naming the field', () => {
    expect(decodeRateLimitRequest(Buffer.from([0x08, 0x01]))).toEqual(new UndecodableRequest('domain: wire type 0, expected 2'));
    expect(decodeRateLimitRequest(Buffer.from([0x0b, 0x0c]))).toBeInstanceOf(UndecodableRequest);
    expect(decodeRateLimitRequest(Buffer.from([0x00, 0x01]))).toBeInstanceOf(UndecodableRequest);
    expect(decodeRateLimitRequest(Buffer.from([0x12, 0xff, 0xff, 0xff, 0xff, 0x0f]))).toBeInstanceOf(UndecodableRequest);
  });

  it('encodes 3,000 random responses byte for byte as protobufjs does', () => {
    const random = prng(SEED + 2);
    for (let i = 0; i < 3000; i++) {
      const res = randomResponse(random);
      expect(encodeRateLimitResponse(res).equals(reference.responseSerialize(res)), `case ${i}`).toBe(true);
    }
  });

  it('bounds every random response from above (the encoder trusts the bound for its scratch buffer)', () => {
    const random = prng(SEED + 3);
    for (let i = 0; i < 3000; i++) {
      const res = randomResponse(random);
      expect(bound(res), `case ${i}`).toBeGreaterThanOrEqual(encodeRateLimitResponse(res).length);
    }
    // Every number at its longest (10-byte varints for negatives and 2^53), every string empty: no slack from strings.
    const longest = { code: -1, limit_remaining: 2 ** 53, duration_until_reset: { seconds: 2 ** 53, nanos: -1 } };
    const none: WireResponse = { overall_code: -1, statuses: [], response_headers_to_add: [], request_headers_to_add: [] };
    const statuses = Array.from({ length: 50 }, () => ({ ...longest, current_limit: { name: '', requests_per_unit: 2 ** 53, unit: -1 } }));
    const headers = Array.from({ length: 50 }, () => ({ key: '', value: '' }));
    // Each kind alone, so the slack of one cannot hide another's bound being too low.
    for (const worst of [
      { ...none, statuses },
      { ...none, response_headers_to_add: headers },
      { ...none, request_headers_to_add: headers },
    ])
      expect(bound(worst)).toBeGreaterThanOrEqual(encodeRateLimitResponse(worst).length);
  });

  it('encodes a response larger than its scratch buffer (16 KiB), then a small one, as protobufjs does', () => {
    // Lengths of 3 bytes (a 20,000-byte value) and a 2-byte one nested in them: contents moved twice.
    const big: WireResponse = {
      overall_code: 2,
      statuses: [{ code: 2, limit_remaining: 0, current_limit: { name: 'é'.repeat(5000), requests_per_unit: 1, unit: 1 } }],
      response_headers_to_add: [{ key: 'x-long', value: 'v'.repeat(20_000) }],
      request_headers_to_add: [],
      raw_body: Buffer.alloc(70_000, 1),
    };
    const small: WireResponse = { overall_code: 1, statuses: [{ code: 1, limit_remaining: 3 }], response_headers_to_add: [], request_headers_to_add: [] };
    for (const res of [big, small, big]) expect(encodeRateLimitResponse(res, true).subarray(5).equals(reference.responseSerialize(res))).toBe(true);
  });
});

describe('10-byte varints in 32-bit fields (issue 22, item 4)', () => {
  /** `v` (a BigInt up to 2^64 - 1) as a 10-byte varint: what protobuf writes for a negative int32 or a
   * uint64 from 2^63, and a valid (padded) encoding of any smaller value. */
  const varint = (v: bigint): number[] => {
    const out: number[] = [];
    for (let i = 0; i < 10; i++, v >>= 7n) out.push(Number(v & 0x7fn) | (i < 9 ? 0x80 : 0));
    return out;
  };
  const len = (bytes: number[]): number[] => [bytes.length, ...bytes];

  it.each([2n ** 64n - 1n, 2n ** 63n + 5n, 2n ** 53n + 3n, 2n ** 40n * 3n + 7n, 2n ** 32n + 1n])(
    'hits_addend %s reads as its low 32 bits, as protobufjs reads it',
    (v) => {
      const entry = [0x0a, ...len([0x0a, 1, 0x6b, 0x12, 1, 0x76])]; // key "k", value "v"
      const bytes = Buffer.from([0x0a, 1, 0x64, 0x12, ...len(entry), 0x18, ...varint(v)]);
      const mine = decodeRateLimitRequest(bytes);
      expect(mine).not.toBeInstanceOf(UndecodableRequest);
      const theirs = reference.requestDeserialize(bytes) as { hits_addend: number };
      expect((mine as { hits_addend: number }).hits_addend).toBe(Number(v % 2n ** 32n));
      expect((mine as { hits_addend: number }).hits_addend).toBe(theirs.hits_addend);
    },
  );

  it("an override's requests_per_unit too", () => {
    const limit = [0x08, ...varint(2n ** 64n - 1n), 0x10, 1];
    const descriptor = [0x0a, ...len([0x0a, 1, 0x6b]), 0x12, ...len(limit)];
    const bytes = Buffer.from([0x0a, 1, 0x64, 0x12, ...len(descriptor)]);
    const mine = decodeRateLimitRequest(bytes) as { descriptors: { limit: { requests_per_unit: number } }[] };
    expect(mine.descriptors[0]!.limit.requests_per_unit).toBe(4294967295);
  });
});

describe('count bounds while decoding (issue 22, item 3)', () => {
  const len = (bytes: number[]): number[] => (bytes.length < 128 ? [bytes.length, ...bytes] : [(bytes.length & 0x7f) | 0x80, bytes.length >> 7, ...bytes]);
  it('2,000,000 empty descriptors (a 4 MB message) are refused at the 65th, not after building them all', () => {
    const body = Buffer.alloc(2 + 2 * 2_000_000);
    body.set([0x0a, 0]); // domain ""
    for (let i = 2; i < body.length; i += 2) body.set([0x12, 0], i);
    const out = decodeRateLimitRequest(body, { maxDescriptors: 64, maxEntries: 32 });
    expect(out).toBeInstanceOf(UndecodableRequest);
    expect(out).toMatchObject({ overBound: true, reason: 'descriptors[64]: more than the maximum of 64 descriptors' });
  });

  it('entries past the bound in one descriptor, likewise', () => {
    const entries = Array.from({ length: 40 }, () => [0x0a, 3, 0x0a, 1, 0x6b]).flat();
    const body = Buffer.from([0x0a, 1, 0x64, 0x12, ...len(entries)]);
    const out = decodeRateLimitRequest(body, { maxDescriptors: 64, maxEntries: 32 });
    expect(out).toMatchObject({ overBound: true, reason: 'descriptors[0].entries[32]: more than the maximum of 32 entries' });
    // Without bounds, the same bytes decode (the bound is the only reason).
    expect(decodeRateLimitRequest(body)).not.toBeInstanceOf(UndecodableRequest);
  });
});
