import { describe, expect, it } from 'vitest';
import { decodeUsageReports, peekDomain } from '../../src/rlqs/decode.js';
import { Reports } from '../helpers/envoy-rlqs.js';

/** The hand decoder against protobufjs's encoding of the same reports (src/rlqs/decode.ts). */

const encode = (o: Record<string, unknown>): Buffer => Buffer.from(Reports.encode(Reports.fromObject(o)).finish());

describe('decodeUsageReports', () => {
  it('reads what protobufjs writes: domain, ids byte for byte, counts to 2^53', () => {
    const usages = Array.from({ length: 50 }, (_, i) => ({
      bucket_id: { bucket: { tenant: Buffer.from(`t${i}`), raw: Buffer.from([0xff, 0x00, i]) } },
      time_elapsed: { seconds: i },
      num_requests_allowed: i * 1000,
      num_requests_denied: i === 7 ? 2 ** 53 : i,
    }));
    const got = decodeUsageReports(encode({ domain: 'd-é', bucket_quota_usages: usages }))!;
    expect(got.domain).toBe('d-é');
    expect(got.bucket_quota_usages).toHaveLength(50);
    got.bucket_quota_usages.forEach((u, i) => {
      expect(u.bucket_id!.bucket).toEqual({ tenant: Buffer.from(`t${i}`), raw: Buffer.from([0xff, 0x00, i]) });
      expect([u.num_requests_allowed, u.num_requests_denied]).toEqual([i * 1000, i === 7 ? 2 ** 53 : i]);
    });
  });

  it('reads absent fields as empty, skips unknown ones, and keeps the last value of a key given twice', () => {
    const empty = decodeUsageReports(encode({ bucket_quota_usages: [{}] }))!;
    expect(empty).toEqual({ domain: '', bucket_quota_usages: [{ bucket_id: null, num_requests_allowed: 0, num_requests_denied: 0 }] });
    // field 9 (varint 1) before the domain; a map entry for key "k" twice: "a" then "b".
    const entry = (v: string) => Buffer.from([0x0a, 0x01, 0x6b, 0x12, 0x01, v.charCodeAt(0)]);
    const bucketId = Buffer.concat([Buffer.from([0x0a, 6]), entry('a'), Buffer.from([0x0a, 6]), entry('b')]);
    const usage = Buffer.concat([Buffer.from([0x0a, bucketId.length]), bucketId, Buffer.from([0x18, 0x05])]);
    const msg = Buffer.concat([Buffer.from([0x48, 0x01, 0x0a, 0x01, 0x64, 0x12, usage.length]), usage]);
    expect(decodeUsageReports(msg)).toEqual({
      domain: 'd',
      bucket_quota_usages: [{ bucket_id: { bucket: { k: Buffer.from('b') } }, num_requests_allowed: 5, num_requests_denied: 0 }],
    });
  });

  it('refuses bytes that are not a report: truncated, a wrong wire type, a length past the end', () => {
    const good = encode({ domain: 'd', bucket_quota_usages: [{ bucket_id: { bucket: { a: Buffer.from('b') } }, num_requests_allowed: 3 }] });
    expect(decodeUsageReports(good.subarray(0, good.length - 2))).toBeUndefined();
    expect(decodeUsageReports(Buffer.from([0x08, 0x01]))).toBeUndefined(); // domain as a varint
    expect(decodeUsageReports(Buffer.from([0x12, 0x7f, 0x00]))).toBeUndefined();
    expect(decodeUsageReports(Buffer.alloc(0))).toEqual({ domain: '', bucket_quota_usages: [] });
  });

  it('does not keep the report alive through the ids it returns', () => {
    const encoded = encode({ domain: 'd', bucket_quota_usages: [{ bucket_id: { bucket: { a: Buffer.from('value') } } }] });
    const msg = Buffer.allocUnsafeSlow(encoded.length); // its own memory, as a message grpc-js hands over
    encoded.copy(msg);
    const v = decodeUsageReports(msg)!.bucket_quota_usages[0]!.bucket_id!.bucket!.a!;
    expect(v.toString()).toBe('value');
    expect(v.buffer).not.toBe(msg.buffer);
  });
});

describe('decodeUsageReports on a string that is not UTF-8', () => {
  it('refuses the report, as protobufjs does (a key read otherwise would be echoed back changed)', () => {
    const entry = Buffer.from([0x0a, 0x02, 0x61, 0xff, 0x12, 0x01, 0x62]);
    const bucketId = Buffer.concat([Buffer.from([0x0a, entry.length]), entry]);
    const usage = Buffer.concat([Buffer.from([0x0a, bucketId.length]), bucketId]);
    const msg = Buffer.concat([Buffer.from([0x12, usage.length]), usage]);
    expect(() => Reports.decode(msg)).toThrow();
    expect(decodeUsageReports(msg)).toBeUndefined();
    expect(decodeUsageReports(Buffer.from([0x0a, 0x01, 0xff]))).toBeUndefined(); // the domain
  });
});

describe('peekDomain', () => {
  it('reads the domain without the usages, and refuses a message malformed at its top level', () => {
    const usages = Array.from({ length: 1000 }, (_, i) => ({ bucket_id: { bucket: { t: Buffer.from(`v${i}`) } }, num_requests_allowed: 1 }));
    const msg = encode({ domain: 'property-api', bucket_quota_usages: usages });
    expect(peekDomain(msg)).toBe('property-api');
    expect(peekDomain(encode({ bucket_quota_usages: usages }))).toBe('');
    expect(peekDomain(msg.subarray(0, msg.length - 1))).toBeUndefined(); // the last usage's length runs past the end
    expect(peekDomain(Buffer.from([0x0a, 0x01, 0xff]))).toBeUndefined();
  });
});
