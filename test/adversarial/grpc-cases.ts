/** The gRPC port under attack: valid-shaped requests through a real grpc-js client, and raw HTTP/2 gRPC
 * frames (node:http2) holding bytes no client library would send. Each case says which answers the
 * contract allows; the executors check the answer and scan everything that comes back for the marker. */

import http2 from 'node:http2';
import { gzipSync } from 'node:zlib';
import * as grpc from '@grpc/grpc-js';
import type { RequestBounds } from '../../src/rls/request.js';
import { clientConstructor, RLS_SERVICE } from '../../src/server/proto.js';
import { enc, varint } from '../helpers/protowire.js';
import type { RlsRequest } from '../helpers/service.js';
import type { LeakScanner, Outcome, Rng } from './fuzz-lib.js';
import { contractAccepts, invalidRequest, MAX_UINT32, validRequest } from './request-cases.js';

const { status } = grpc;
export const METHOD_PATH = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';
const DEADLINE_MS = 10_000;

/** 'decided': grpc-status 0 with a RateLimitResponse saying OK or OVER_LIMIT. 'http415': grpc-js refuses a
 * non-gRPC content type before any handler runs. Numbers: gRPC status codes. */
export type Answer = 'decided' | 'http415' | number;

export type GrpcCase =
  | { kind: string; via: 'client'; request: RlsRequest; allowed: Answer[] }
  | { kind: string; via: 'raw'; body: Buffer; headers?: Record<string, string>; allowed: Answer[] };

const DECIDED_OR_INVALID: Answer[] = ['decided', status.INVALID_ARGUMENT];

// ---------------------------------------------------------------- protobuf bytes, written by hand

/** RateLimitRequest bytes from test/helpers/protowire.ts, independent of protobufjs. */
export function encodeRequest(req: RlsRequest): number[] {
  const out: number[] = [];
  if (req.domain) out.push(...enc.string(1, req.domain));
  for (const d of req.descriptors) {
    const parts = d.entries.map((e) => enc.message(1, ...(e.key ? [enc.string(1, e.key)] : []), ...(e.value ? [enc.string(2, e.value)] : [])));
    if (d.limit) parts.push(enc.message(2, enc.varint(1, d.limit.requests_per_unit), enc.varint(2, Number(d.limit.unit))));
    if (d.hits_addend) parts.push(enc.message(3, enc.varint(1, d.hits_addend.value)));
    if (d.is_negative_hits) parts.push(enc.varint(4, 1));
    out.push(...enc.message(2, ...parts));
  }
  if (req.hits_addend) out.push(...enc.varint(3, req.hits_addend));
  return out;
}

/** A gRPC length-prefixed message: flag byte, 4-byte length (possibly a lie), then the bytes. */
export function frame(message: Buffer, flag = 0, declared = message.length): Buffer {
  const head = Buffer.alloc(5);
  head[0] = flag;
  head.writeUInt32BE(declared >>> 0, 1);
  return Buffer.concat([head, message]);
}

const INVALID_UTF8: number[][] = [[0xff], [0xc0, 0xaf], [0xed, 0xa0, 0x80], [0xe2, 0x82], [0xf8, 0x88, 0x80, 0x80, 0x80], [0x80]];

/** The marker followed (or preceded) by bytes that are not UTF-8: overlong, surrogate, truncated, stray. */
function badUtf8(r: Rng, marker: string): number[] {
  const bad = r.pick(INVALID_UTF8);
  const text = [...Buffer.from(marker)];
  return r.chance(0.5) ? [...text, ...bad] : [...bad, ...text];
}

function badUtf8Request(r: Rng, marker: string): number[] {
  const good = (s: string): number[] => [...Buffer.from(s)];
  const where = r.int(3);
  const domain = where === 0 ? badUtf8(r, marker) : good('property-api');
  const key = where === 1 ? badUtf8(r, marker) : good('token');
  const value = where === 2 ? badUtf8(r, marker) : good(marker);
  return [
    ...enc.bytes(1, domain),
    ...enc.message(2, enc.message(1, enc.string(1, 'category'), enc.string(2, 'read')), enc.message(1, enc.bytes(1, key), enc.bytes(2, value))),
  ];
}

/** A varint of exactly n bytes (n ≥ 1) with the given low bits: how a non-canonical encoder might write it. */
function paddedVarint(value: number, n: number): number[] {
  const canonical = varint(value);
  if (canonical.length >= n) return canonical;
  const out = canonical.map((b) => b | 0x80);
  while (out.length < n - 1) out.push(0x80);
  out.push(0x00);
  return out;
}

// ---------------------------------------------------------------- mutations of valid bytes

/** `baseAnswer`: what the unmutated bytes get, for mutations that keep their meaning. */
function mutate(r: Rng, base: number[], baseAnswer: Answer, marker: string): { kind: string; bytes: number[]; allowed: Answer[] } {
  const b = [...base];
  switch (r.int(12)) {
    case 0:
      for (let i = r.between(1, 4); i > 0 && b.length; i--) b[r.int(b.length)] = r.int(256);
      return { kind: 'bit flips', bytes: b, allowed: DECIDED_OR_INVALID };
    case 1:
      return { kind: 'truncated message', bytes: b.slice(0, r.int(b.length)), allowed: DECIDED_OR_INVALID };
    case 2:
      b.splice(r.int(b.length + 1), 0, ...r.bytes(r.between(1, 16)));
      return { kind: 'random bytes spliced in', bytes: b, allowed: DECIDED_OR_INVALID };
    case 3:
      // Decided, never refused: a refusal would let the request through Envoy (failure_mode_deny: false).
      return { kind: 'invalid UTF-8', bytes: badUtf8Request(r, marker), allowed: ['decided'] };
    case 4: {
      const wrong = r.pick([enc.varint(1, 7), enc.varint(2, 1), enc.bytes(3, [1, 2]), [0x0d, 1, 2, 3, 4], [0x11, ...r.bytes(8)]]);
      return { kind: 'wrong wire type', bytes: [...wrong, ...b], allowed: [status.INVALID_ARGUMENT] };
    }
    case 5: {
      const length = r.pick([2 ** 31, MAX_UINT32, 2 ** 40, b.length + 1]);
      return {
        kind: 'huge declared length',
        bytes: [...enc.string(1, marker), 0x12, ...varint(length), ...b.slice(0, 20)],
        allowed: [status.INVALID_ARGUMENT],
      };
    }
    case 6: {
      const depth = r.pick([100, 10_000, 200_000]); // under the 256 KiB receive limit: it reaches the decoder
      return { kind: 'nested groups', bytes: [...b, ...Array<number>(depth).fill(0x7b)], allowed: [status.INVALID_ARGUMENT] };
    }
    case 7:
      return { kind: 'nested unknown messages', bytes: [...b, ...nestedUnknown(r.pick([10, 1000, 20_000]), marker)], allowed: [baseAnswer] };
    case 8:
      return extremeNumbers(r, b);
    case 9: {
      const n = r.between(6, 9);
      return { kind: 'padded varint', bytes: [...b, 0x18, ...paddedVarint(1, n), ...enc.string(99, marker)], allowed: [status.INVALID_ARGUMENT] };
    }
    case 10:
      return { kind: 'field number 0', bytes: [...b, 0x02, 1, 0x41], allowed: [status.INVALID_ARGUMENT] };
    default:
      return { kind: 'random bytes', bytes: r.bytes(r.int(200)), allowed: DECIDED_OR_INVALID };
  }
}

/** Unknown field 99, nested `depth` deep: skipped unread, so no recursion happens on it. The lengths are
 * worked out from the inside, then the headers written from the outside, in one pass. */
function nestedUnknown(depth: number, marker: string): number[] {
  const inner = enc.string(99, marker);
  const lengths = [inner.length];
  for (let i = 1; i < depth; i++) lengths.push(lengths[i - 1]! + 2 + varint(lengths[i - 1]!).length);
  const out: number[] = [];
  for (let i = depth - 1; i >= 0; i--) out.push(0x9a, 0x06, ...varint(lengths[i]!));
  out.push(...inner);
  return out;
}

function extremeNumbers(r: Rng, base: number[]): { kind: string; bytes: number[]; allowed: Answer[] } {
  const big = r.pick<number | bigint>([2 ** 32, MAX_UINT32, 2n ** 63n, 2n ** 64n - 1n, 2 ** 53 + 1]);
  const hits = enc.varint(3, big);
  const negativeUnit = [0x10, ...varint(BigInt.asUintN(64, -1n))];
  const override = enc.message(2, enc.message(1, enc.string(1, 'category'), enc.string(2, 'read')), enc.message(2, enc.varint(1, big), negativeUnit));
  const wrapped = enc.message(2, enc.message(1, enc.string(1, 'category'), enc.string(2, 'read')), enc.message(3, enc.varint(1, big)));
  const eleven = [0x18, ...Array<number>(10).fill(0xff), 0x01];
  // Envoy 1.38's refund flag as any varint protobuf reads as true, and as a wire type that is not a varint.
  const refund = enc.message(2, enc.message(1, enc.string(1, 'category'), enc.string(2, 'read')), enc.varint(3, 0), enc.varint(4, big));
  const refundAsBytes = enc.message(2, enc.message(1, enc.string(1, 'category'), enc.string(2, 'read')), enc.string(4, 'yes'));
  const [kind, bytes, allowed]: [string, number[], Answer[]] = r.pick([
    ['extreme request hits_addend', [...base, ...hits], DECIDED_OR_INVALID],
    ['extreme override, negative unit', [...enc.string(1, 'property-api'), ...override], [status.INVALID_ARGUMENT]],
    ['extreme descriptor hits_addend', [...enc.string(1, 'property-api'), ...wrapped], DECIDED_OR_INVALID],
    ['11-byte varint', [...base, ...eleven], [status.INVALID_ARGUMENT]],
    ['extreme is_negative_hits', [...enc.string(1, 'property-api'), ...refund], DECIDED_OR_INVALID],
    ['is_negative_hits as bytes', [...enc.string(1, 'property-api'), ...refundAsBytes], DECIDED_OR_INVALID],
  ]);
  return { kind, bytes, allowed };
}

// ---------------------------------------------------------------- cases

/** One case: 40% valid-shaped through grpc-js, the rest raw frames of every sort. */
export function grpcCase(r: Rng, index: number, marker: string, bounds: RequestBounds): GrpcCase {
  // The costly ones (4 MiB and more on the wire, or after decompression) only on a few fixed indices.
  if (index % 400 === 17)
    return { kind: 'oversize message', via: 'raw', body: frame(Buffer.alloc(4 * 1024 * 1024 + 1 + r.int(1000), 0x41)), allowed: [status.RESOURCE_EXHAUSTED] };
  if (index % 400 === 217) {
    return {
      kind: 'gzip bomb',
      via: 'raw',
      body: frame(gzipSync(Buffer.alloc(8 * 1024 * 1024)), 1),
      headers: { 'grpc-encoding': 'gzip' },
      allowed: [status.RESOURCE_EXHAUSTED],
    };
  }
  const roll = r.int(100);
  if (roll < 25) {
    const request = validRequest(r, marker, bounds);
    return { kind: 'valid (grpc-js)', via: 'client', request, allowed: [contractAccepts(request, bounds) ? 'decided' : status.INVALID_ARGUMENT] };
  }
  if (roll < 40) {
    const { request, kind } = invalidRequest(r, marker, bounds);
    return { kind: `${kind} (grpc-js)`, via: 'client', request, allowed: [contractAccepts(request, bounds) ? 'decided' : status.INVALID_ARGUMENT] };
  }
  const shaped = r.chance(0.5) ? validRequest(r, marker, bounds) : invalidRequest(r, marker, bounds).request;
  const base = encodeRequest(shaped);
  const baseAnswer: Answer = contractAccepts(shaped, bounds) ? 'decided' : status.INVALID_ARGUMENT;
  if (roll < 55) return { kind: 'valid shape, raw', via: 'raw', body: frame(Buffer.from(base)), allowed: [baseAnswer] };
  if (roll < 88) {
    const m = mutate(r, base, baseAnswer, marker);
    return { kind: m.kind, via: 'raw', body: frame(Buffer.from(m.bytes)), allowed: m.allowed };
  }
  return framing(r, Buffer.from(base), marker);
}

/** Frames that are wrong as gRPC rather than as protobuf. grpc-js answers these before the handler runs;
 * the allowed answers are grpc-js's own (UNIMPLEMENTED for a unary call without exactly one message). */
function framing(r: Rng, message: Buffer, marker: string): GrpcCase {
  const raw = (kind: string, body: Buffer, allowed: Answer[], headers?: Record<string, string>): GrpcCase => ({ kind, via: 'raw', body, allowed, headers });
  switch (r.int(10)) {
    case 0:
      return raw('frame shorter than declared', frame(message, 0, message.length + r.between(1, 1000)), [status.UNIMPLEMENTED]);
    case 1:
      return raw('no message', Buffer.from(r.bytes(r.int(5))), [status.UNIMPLEMENTED]);
    case 2:
      return raw('two messages', Buffer.concat([frame(message), frame(message)]), [status.UNIMPLEMENTED, status.INVALID_ARGUMENT]);
    case 3:
      return raw('declared length over the maximum', frame(message, 0, r.pick([MAX_UINT32, 4 * 1024 * 1024 + 1])), [status.RESOURCE_EXHAUSTED]);
    case 4:
      return raw('gzip', frame(gzipSync(message), 1), DECIDED_OR_INVALID, { 'grpc-encoding': 'gzip' });
    case 5:
      // grpc-js answers INTERNAL "Failed to decompress message", before Tollgate sees the call (see docs/operations.md).
      return raw('gzip garbage', frame(Buffer.from([...Buffer.from(marker), ...r.bytes(20)]), 1), [status.INTERNAL], {
        'grpc-encoding': 'gzip',
      });
    case 6:
      return raw('compressed flag without an encoding', frame(message, r.pick([1, 2, 0x80, 0xff])), DECIDED_OR_INVALID);
    case 7:
      return raw('metadata holding the marker', frame(message), DECIDED_OR_INVALID, {
        'x-token': marker,
        authorization: `Bearer ${marker}`,
        'x-envoy-original-path': `/${marker}`,
      });
    case 8:
      // No marker in the path: grpc-js names an unknown method in its answer (a grpc-js limit).
      return raw('unknown method', frame(message), [status.UNIMPLEMENTED], {
        ':path': r.pick(['/envoy.service.ratelimit.v3.RateLimitService/Nope', '/', '/x/y/z']),
      });
    default:
      return raw('not a gRPC content type', frame(message), ['http415'], {
        'content-type': r.pick(['text/plain', 'application/json', `application/${marker}`]),
      });
  }
}

// ---------------------------------------------------------------- executors

function judge(got: Answer, allowed: Answer[], detail: string): Outcome {
  return allowed.includes(got) ? 'ok' : { wrong: `answered ${String(got)}${detail ? ` (${detail})` : ''}, expected one of ${allowed.join(', ')}` };
}

const RESPONSE = clientConstructor(RLS_SERVICE).service.ShouldRateLimit!;

/** A real grpc-js client, as Envoy's side would be. */
export class GrpcClientPool {
  private readonly clients: grpc.Client[];
  constructor(port: number, size: number) {
    const Ctor = clientConstructor(RLS_SERVICE);
    // A distinct channel option per client forces a connection each.
    this.clients = Array.from({ length: size }, (_, i) => new Ctor(`127.0.0.1:${port}`, grpc.credentials.createInsecure(), { 'grpc.fuzz_channel': i }));
  }

  call(index: number, request: RlsRequest): Promise<{ err: grpc.ServiceError | null; res: unknown }> {
    const client = this.clients[index % this.clients.length] as grpc.Client & { ShouldRateLimit: (...a: unknown[]) => void };
    return new Promise((resolve) => {
      client.ShouldRateLimit(request, { deadline: Date.now() + DEADLINE_MS }, (err: grpc.ServiceError | null, res: unknown) => resolve({ err, res }));
    });
  }

  close(): void {
    for (const c of this.clients) c.close();
  }
}

export async function execClient(pool: GrpcClientPool, c: Extract<GrpcCase, { via: 'client' }>, index: number, scanner: LeakScanner): Promise<Outcome> {
  const { err, res } = await pool.call(index, c.request);
  if (err) {
    scanner.check(index, 'a gRPC status message', `${err.details} ${err.message} ${JSON.stringify(err.metadata?.getMap() ?? {})}`);
    if (err.code === status.DEADLINE_EXCEEDED) return 'hang';
    return judge(err.code, c.allowed, err.details);
  }
  return judgeResponse(res as WireResponse, c.request.descriptors.length, c.allowed, index, scanner);
}

interface WireResponse {
  overall_code: number;
  statuses: { code: number }[];
  raw_body?: Buffer;
}

function judgeResponse(res: WireResponse, descriptors: number | undefined, allowed: Answer[], index: number, scanner: LeakScanner): Outcome {
  scanner.check(index, 'a RateLimitResponse', `${JSON.stringify(res)} ${res.raw_body ? Buffer.from(res.raw_body).toString('utf8') : ''}`);
  const codes = [1, 2];
  if (!codes.includes(res.overall_code)) return { wrong: `overall_code ${res.overall_code}` };
  if (descriptors !== undefined && res.statuses.length !== descriptors) return { wrong: `${res.statuses.length} statuses for ${descriptors} descriptors` };
  if (!res.statuses.every((s) => codes.includes(s.code))) return { wrong: 'a status code other than OK or OVER_LIMIT' };
  return judge('decided', allowed, '');
}

/** One HTTP/2 connection per worker, opened again when the server closed it. */
export class RawSessions {
  private readonly sessions = new Map<number, http2.ClientHttp2Session>();
  constructor(private readonly port: number) {}

  get(worker: number): http2.ClientHttp2Session {
    let s = this.sessions.get(worker);
    if (!s || s.closed || s.destroyed) {
      // Room for a 4 MiB message in flight beside others: Node's default (10 MB) would make this client
      // refuse new streams (ENHANCE_YOUR_CALM) while one is queued.
      s = http2.connect(`http://127.0.0.1:${this.port}`, { maxSessionMemory: 256 });
      s.on('error', () => undefined); // a reset connection fails its streams, which report it
      this.sessions.set(worker, s);
    }
    return s;
  }

  close(): void {
    for (const s of this.sessions.values()) s.close();
  }
}

export function execRaw(sessions: RawSessions, c: Extract<GrpcCase, { via: 'raw' }>, index: number, scanner: LeakScanner): Promise<Outcome> {
  const headers = { ':method': 'POST', ':path': METHOD_PATH, 'content-type': 'application/grpc', te: 'trailers', ...c.headers };
  return new Promise((resolve) => {
    const stream = sessions.get(index % 8).request(headers);
    let head: http2.IncomingHttpHeaders = {};
    let trailers: http2.IncomingHttpHeaders = {};
    const data: Buffer[] = [];
    let statusArrived = false;
    const judged = (closed: string): Outcome => judgeRaw(head, trailers, Buffer.concat(data), c.allowed, index, scanner, closed);
    // A stream is judged when it closes, so cases never overlap on a connection. On a loaded machine a 4 MiB
    // body the server has already answered can take past the deadline to drain (issue 29): the answer that
    // arrived counts then. Nothing is reset unless no answer came: resetting answered streams is what a
    // rapid-reset attack does, and Node's HTTP/2 server ends such a session with ENHANCE_YOUR_CALM.
    const timer = setTimeout(() => {
      if (statusArrived) return resolve(judged('answered'));
      stream.close(http2.constants.NGHTTP2_CANCEL);
      resolve('hang');
    }, DEADLINE_MS);
    stream.on('response', (h) => {
      head = h;
      if (h['grpc-status'] !== undefined || Number(h[':status']) !== 200) statusArrived = true;
    });
    stream.on('trailers', (t) => {
      trailers = t;
      statusArrived = true;
    });
    stream.on('data', (d: Buffer) => data.push(d));
    let failed = '';
    stream.on('error', (err) => (failed = err.message)); // 'close' follows and judges what arrived
    stream.on('close', () => {
      clearTimeout(timer);
      resolve(judged(`the stream closed without an answer (RST_STREAM ${stream.rstCode}${failed && `, ${failed}`})`));
    });
    stream.end(c.body);
  });
}

function judgeRaw(
  head: http2.IncomingHttpHeaders,
  trailers: http2.IncomingHttpHeaders,
  body: Buffer,
  allowed: Answer[],
  index: number,
  scanner: LeakScanner,
  closed: string,
): Outcome {
  const message = String(trailers['grpc-message'] ?? head['grpc-message'] ?? '');
  scanner.check(index, 'HTTP/2 headers or trailers', `${JSON.stringify(head)} ${JSON.stringify(trailers)} ${safeDecode(message)}`);
  scanner.check(index, 'an HTTP/2 body', body.toString('latin1'));
  if (head[':status'] === undefined) return { wrong: closed };
  const httpStatus = Number(head[':status']);
  if (httpStatus !== 200) return judge(httpStatus === 415 ? 'http415' : -httpStatus, allowed, `HTTP ${httpStatus}`);
  const code = Number(trailers['grpc-status'] ?? head['grpc-status']);
  if (code !== status.OK) return judge(code, allowed, safeDecode(message));
  if (body.length < 5 || body.readUInt32BE(1) !== body.length - 5) return { wrong: 'OK without exactly one response message' };
  const res = RESPONSE.responseDeserialize(body.subarray(5)) as WireResponse;
  return judgeResponse(res, undefined, allowed, index, scanner);
}

function safeDecode(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}
