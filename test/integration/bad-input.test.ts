import * as grpc from '@grpc/grpc-js';
import { status } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metric, scrape } from '../helpers/metrics.js';
import { enc, varint } from '../helpers/protowire.js';
import { capturingLogger, type RlsRequest, startTestService, type TestService } from '../helpers/service.js';

const SECRET = 'Bearer s3cr3t-token-value';
const METHOD = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';

describe('bad requests get INVALID_ARGUMENT naming the problem', () => {
  let t: TestService;
  beforeAll(async () => {
    t = await startTestService({ args: ['--max-descriptors', '3', '--max-entries', '4', '--max-value-bytes', '64'] });
  });
  afterAll(async () => t.close());

  const entry = (key: string, value: string) => ({ key, value });
  const cases: [string, RlsRequest, RegExp][] = [
    ['empty domain', { domain: '', descriptors: [{ entries: [entry('category', 'read')] }] }, /domain is empty/],
    ['no descriptors', { domain: 'property-api', descriptors: [] }, /no descriptors/],
    [
      'a descriptor with no entries',
      { domain: 'property-api', descriptors: [{ entries: [entry('a', 'b')] }, { entries: [] }] },
      /descriptors\[1\] has no entries/,
    ],
    [
      'an empty key',
      { domain: 'property-api', descriptors: [{ entries: [entry('category', 'read'), entry('', SECRET)] }] },
      /descriptors\[0\]\.entries\[1\] has an empty key/,
    ],
    [
      'too many descriptors',
      { domain: 'property-api', descriptors: Array(4).fill({ entries: [entry('a', 'b')] }) },
      /more than the maximum of 3 descriptors|4 descriptors, more than the maximum of 3/,
    ],
    [
      'too many entries',
      { domain: 'property-api', descriptors: [{ entries: Array(5).fill(entry('a', 'b')) }] },
      /more than the maximum of 4 entries|5 entries, more than the maximum of 4/,
    ],
    [
      'a value over the maximum length',
      { domain: 'property-api', descriptors: [{ entries: [entry('token', `${SECRET}${'x'.repeat(100)}`)] }] },
      /entries\[0\]: value is 125 bytes, more than the maximum of 64/,
    ],
    ['a key over the maximum length', { domain: 'property-api', descriptors: [{ entries: [entry('k'.repeat(65), 'v')] }] }, /key is longer than 64 bytes/],
    [
      'a WEEK override, which RateLimitUnit lacks',
      { domain: 'property-api', descriptors: [{ entries: [entry('a', 'b')], limit: { requests_per_unit: 1, unit: 7 } }] },
      /limit\.unit must be SECOND/,
    ],
  ];

  it.each(cases)('%s', async (_name, req, message) => {
    const err = await t.rls.call(req).then(
      () => undefined,
      (e: { code: number; details: string }) => e,
    );
    expect(err?.code).toBe(status.INVALID_ARGUMENT);
    expect(err?.details).toMatch(message);
    expect(err?.details).not.toContain('s3cr3t');
  });

  it('never names the key of an over-long value: a client can send a token as a key', async () => {
    const err = await t.rls
      .call({ domain: 'property-api', descriptors: [{ entries: [entry('s3cr3t-as-key', 'v'.repeat(65))] }] })
      .catch((e: grpc.ServiceError) => e);
    expect((err as grpc.ServiceError).code).toBe(status.INVALID_ARGUMENT);
    expect((err as grpc.ServiceError).details).toMatch(/entries\[0\]: value is 65 bytes/);
    expect((err as grpc.ServiceError).details).not.toContain('s3cr3t');
  });

  it('keeps serving after bad input', async () => {
    const ok = await t.rls.call({ domain: 'property-api', descriptors: [{ entries: [entry('category', 'read'), entry('token', SECRET)] }] });
    expect(ok.overall_code).toBe('OK');
  });
});

/** Sends bytes as they are, past any serializer, and returns the status. */
function callRaw(port: number, bytes: Buffer): Promise<grpc.StatusObject & { details: string; response?: Buffer }> {
  const client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  return new Promise((resolve) => {
    const identity = (b: Buffer): Buffer => b;
    client.makeUnaryRequest(METHOD, identity, identity, bytes, { deadline: Date.now() + 5000 }, (err, response?: Buffer) => {
      client.close();
      resolve(err ? (err as unknown as grpc.StatusObject) : { code: status.OK, details: '', metadata: new grpc.Metadata(), response });
    });
  });
}

describe("bytes that are not a valid RateLimitRequest are the client's fault", () => {
  let t: TestService;
  const log = capturingLogger('trace');
  beforeAll(async () => {
    t = await startTestService({ logger: log.logger });
  });
  afterAll(async () => t.close());

  const entryMsg = (key: number[], value: number[]) => enc.message(2, enc.message(1, enc.bytes(1, key), enc.bytes(2, value)));
  const ascii = (s: string) => [...Buffer.from(s)];
  const undecodable: [string, number[], RegExp][] = [
    ['a length beyond the message', [...enc.string(1, 'property-api'), 0x12, ...varint(1000), 1, 2, 3], /descriptors\[0\]: declared length 1000/],
    ['a domain sent as a number', [...enc.varint(1, 5), ...entryMsg(ascii('category'), ascii('read'))], /domain: wire type 0, expected 2/],
    [
      'nested groups, which protobufjs recursed into without bound',
      [...enc.string(1, 'property-api'), ...Array<number>(200_000).fill(0x7b)],
      /field 15: unsupported wire type 3/,
    ],
    ['a varint of 11 bytes', [...enc.string(1, 'property-api'), 0x18, ...Array(10).fill(0xff), 0x01], /hits_addend: malformed varint/],
  ];

  it.each(undecodable)('%s: INVALID_ARGUMENT, counted', async (_name, bytes, message) => {
    const before = metric((await scrape(t.service.httpPort)).series, 'tollgate_grpc_errors_total', { code: 'INVALID_ARGUMENT' }) ?? 0;
    const s = await callRaw(t.service.grpcPort, Buffer.from(bytes));
    expect(s.code).toBe(status.INVALID_ARGUMENT);
    expect(s.details).toMatch(message);
    const after = metric((await scrape(t.service.httpPort)).series, 'tollgate_grpc_errors_total', { code: 'INVALID_ARGUMENT' });
    expect(after).toBe(before + 1);
  });

  it('a token that is not UTF-8 is decided on a counter of its own, never refused (a refusal would pass Envoy)', async () => {
    // protobufjs decoded both to the same string, U+FFFD in place of the bad byte: one shared counter.
    const reports = (bad: number) =>
      Buffer.from([
        ...enc.string(1, 'property-api'),
        ...enc.message(
          2,
          enc.message(1, enc.string(1, 'category'), enc.string(2, 'reports')),
          enc.message(1, enc.string(1, 'token'), enc.bytes(2, [...ascii('s3cr3t'), bad])),
        ),
      ]);
    const codes: number[] = [];
    // overall_code is field 1 of the response, written first: its tag, then the code.
    for (const bad of [0xff, 0xff, 0xfe, 0xfe]) codes.push((await callRaw(t.service.grpcPort, reports(bad))).response![1]!);
    expect(codes).toEqual([1, 1, 1, 1]);
    const third = await t.rls.call({
      domain: 'property-api',
      descriptors: [
        {
          entries: [
            { key: 'category', value: 'reports' },
            { key: 'token', value: 's3cr3t\ufffd' },
          ],
        },
      ],
    });
    expect(third.overall_code).toBe('OK'); // U+FFFD as text is a third token, not either of the two
  });

  it('a well-formed request sent the same way is decided', async () => {
    const bytes = [...enc.string(1, 'property-api'), ...entryMsg(ascii('category'), ascii('read'))];
    expect((await callRaw(t.service.grpcPort, Buffer.from(bytes))).code).toBe(status.OK);
  });

  it('no log line at any level holds a request value, the domain of an unknown one included', async () => {
    await t.rls.call({ domain: 's3cr3t-domain', descriptors: [{ entries: [{ key: 's3cr3t-key', value: SECRET }] }] });
    await t.rls.call({
      domain: 'property-api',
      descriptors: [
        {
          entries: [
            { key: 'category', value: 's3cr3t-category' },
            { key: 'token', value: SECRET },
          ],
        },
      ],
    });
    const text = JSON.stringify(log.lines());
    expect(text).toContain('"msg":"decision"');
    expect(text).not.toContain('s3cr3t');
  });
});
