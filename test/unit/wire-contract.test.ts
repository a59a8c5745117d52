import { describe, expect, it } from 'vitest';
import { HEALTH_SERVICE, RLS_SERVICE, serviceDefinition } from '../../src/server/proto.js';
import { decode, enc, fields, only } from '../helpers/protowire.js';

const rls = serviceDefinition(RLS_SERVICE).ShouldRateLimit!;
const health = serviceDefinition(HEALTH_SERVICE).Check!;

describe('wire contract: proto/ field numbers equal Envoy RLS v3', () => {
  it('serves envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit', () => {
    expect(rls.path).toBe('/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit');
    expect(health.path).toBe('/grpc.health.v1.Health/Check');
  });

  it('decodes a RateLimitRequest encoded independently', () => {
    const bytes = Buffer.from([
      ...enc.string(1, 'property-api'), // domain = 1
      ...enc.message(
        2, // descriptors = 2
        enc.message(1, enc.string(1, 'category'), enc.string(2, 'read')), // entries = 1 {key = 1, value = 2}
        enc.message(1, enc.string(1, 'token'), enc.string(2, 'Bearer abc')),
        enc.message(2, enc.varint(1, 7), enc.varint(2, 3)), // limit = 2 {requests_per_unit = 1, unit = 2 (HOUR)}
        enc.message(3, enc.varint(1, 5)), // hits_addend = 3 (UInt64Value.value = 1)
      ),
      ...enc.varint(3, 2), // hits_addend = 3
    ]);
    const req = rls.requestDeserialize(bytes) as Record<string, unknown>;
    expect(req).toMatchObject({
      domain: 'property-api',
      hits_addend: 2,
      descriptors: [
        {
          entries: [
            { key: 'category', value: 'read' },
            { key: 'token', value: 'Bearer abc' },
          ],
          limit: { requests_per_unit: 7, unit: 3 },
          hits_addend: { value: 5 },
        },
      ],
    });
  });

  it('leaves an absent per-descriptor hits_addend unset (so 0 can mean check-only)', () => {
    const bytes = Buffer.from([...enc.string(1, 'd'), ...enc.message(2, enc.message(1, enc.string(1, 'k'), enc.string(2, 'v')))]);
    const req = rls.requestDeserialize(bytes) as { descriptors: { hits_addend: unknown; limit: unknown }[] };
    expect(req.descriptors[0]!.hits_addend).toBeNull();
    expect(req.descriptors[0]!.limit).toBeNull();
  });

  it('encodes a RateLimitResponse with the field numbers Envoy reads', () => {
    const bytes = rls.responseSerialize({
      overall_code: 2,
      statuses: [
        {
          code: 2,
          current_limit: { name: 'read-per-week', requests_per_unit: 10, unit: 7 },
          limit_remaining: 4,
          duration_until_reset: { seconds: 3, nanos: 5 },
          quota: { requests: 8, id: 'q' },
        },
      ],
      response_headers_to_add: [{ key: 'Retry-After', value: '1' }],
      request_headers_to_add: [{ key: 'x-req', value: 'v' }],
      raw_body: Buffer.from('{}'),
      dynamic_metadata: { fields: { k: { string_value: 'v' } } },
      quota: { requests: 9, valid_until: { seconds: 11, nanos: 0 }, id: 'top' },
    });
    expect(only(bytes, 1).value).toBe(2n); // overall_code = 1, OVER_LIMIT = 2
    const status = only(bytes, 2).value as Buffer; // statuses = 2
    expect(only(status, 1).value).toBe(2n); // code = 1
    const limit = only(status, 2).value as Buffer; // current_limit = 2
    expect((only(limit, 3).value as Buffer).toString()).toBe('read-per-week'); // name = 3
    expect(only(limit, 1).value).toBe(10n); // requests_per_unit = 1
    expect(only(limit, 2).value).toBe(7n); // unit = 2, WEEK = 7
    expect(only(status, 3).value).toBe(4n); // limit_remaining = 3
    const duration = only(status, 4).value as Buffer; // duration_until_reset = 4
    expect(decode(duration).map((f) => [f.field, f.value])).toEqual([
      [1, 3n],
      [2, 5n],
    ]);
    const statusQuota = only(status, 5).value as Buffer; // quota = 5
    expect(only(statusQuota, 1).value).toBe(8n);
    const header = only(bytes, 3).value as Buffer; // response_headers_to_add = 3
    expect((only(header, 1).value as Buffer).toString()).toBe('Retry-After'); // key = 1
    expect((only(header, 2).value as Buffer).toString()).toBe('1'); // value = 2
    expect(fields(bytes, 4)).toHaveLength(1); // request_headers_to_add = 4
    expect((only(bytes, 5).value as Buffer).toString()).toBe('{}'); // raw_body = 5
    expect(fields(bytes, 6)).toHaveLength(1); // dynamic_metadata = 6
    const quota = only(bytes, 7).value as Buffer; // quota = 7
    expect(only(quota, 1).value).toBe(9n); // requests = 1
    expect(decode(only(quota, 2).value as Buffer)[0]!.value).toBe(11n); // valid_until = 2
    expect((only(quota, 3).value as Buffer).toString()).toBe('top'); // id = 3
  });

  it('decodes a HeaderValue raw_value (field 3) and the health messages', () => {
    const hc = health.requestDeserialize(Buffer.from(enc.string(1, 'envoy.service.ratelimit.v3.RateLimitService')));
    expect(hc).toEqual({ service: 'envoy.service.ratelimit.v3.RateLimitService' });
    expect(only(health.responseSerialize({ status: 2 }), 1).value).toBe(2n);
    const withRaw = rls.responseSerialize({ overall_code: 1, response_headers_to_add: [{ key: 'k', raw_value: Buffer.from([0xff]) }] });
    const h = only(withRaw, 3).value as Buffer;
    expect([...(only(h, 3).value as Buffer)]).toEqual([0xff]);
  });
});
