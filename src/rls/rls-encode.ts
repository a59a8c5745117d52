import type { WireHeader, WireResponse, WireStatus } from '../response/wire.js';
import { LEN, VARINT } from './rls-decode.js';

/** RateLimitResponse, encoded by hand (rls-codec.ts says why). */

/** Bytes of a varint; a negative int32 takes 10, as protobuf writes it. */
function varintSize(n: number): number {
  if (n < 0) return 10;
  if (n < 0x80) return 1;
  if (n < 0x4000) return 2;
  if (n < 0x200000) return 3;
  if (n < 0x10000000) return 4;
  let size = 5;
  for (let rest = Math.floor(n / 0x800000000); rest > 0; rest = Math.floor(rest / 128)) size++;
  return size;
}

/** Strings up to this many characters are written in JS when ASCII: the headers' names and numbers a response
 * carries cost less so than in a call to buf.write (a native call each). */
const SHORT = 64;

/** Header names' encoded fields (tag, length, bytes), by name. Names come from the config, never from a request:
 * a few, kept up to MAX_NAMES (a config with more writes the rest as any string). */
const NAMES = new Map<string, Buffer>();
const MAX_NAMES = 64;

/** Where responses are written, in one pass, before being copied out at their size: one buffer for every call
 * (encoding is synchronous), grown when a response could need more. */
let scratch = Buffer.allocUnsafeSlow(16 * 1024);

/** Writes a message in one pass: a nested message's length is written after its contents, into the byte kept
 * for it (every length under 128, the usual case), the contents moved along when the length takes more. No
 * sizing pass over the message first, and no string measured on its own. */
class Writer {
  pos = 0;
  constructor(readonly buf: Buffer) {}

  /** Starts a length-delimited field's contents; `end` with what this returns writes its length. */
  begin(key: number): number {
    this.buf[this.pos++] = key;
    this.pos++; // the length's first byte
    return this.pos;
  }

  end(start: number): void {
    const len = this.pos - start;
    if (len < 0x80) {
      this.buf[start - 1] = len;
      return;
    }
    const extra = varintSize(len) - 1;
    this.buf.copyWithin(start + extra, start, this.pos);
    const end = this.pos + extra;
    this.pos = start - 1;
    this.varint(len);
    this.pos = end;
  }

  varint(n: number): void {
    if (n < 0) {
      // A negative int32: its 64-bit two's complement, 10 bytes.
      let v = BigInt.asUintN(64, BigInt(n));
      for (let i = 0; i < 9; i++, v >>= 7n) this.buf[this.pos++] = Number(v & 0x7fn) | 0x80;
      this.buf[this.pos++] = Number(v);
      return;
    }
    // Above 2^31 in floating point (a uint32 field's top half, or a 64-bit value); below, in int32 bit operations.
    while (n > 0x7fffffff) {
      this.buf[this.pos++] = (n % 128) | 0x80;
      n = Math.floor(n / 128);
    }
    while (n > 0x7f) {
      this.buf[this.pos++] = (n & 0x7f) | 0x80;
      n >>>= 7;
    }
    this.buf[this.pos++] = n;
  }

  /** A string field: ASCII written byte by byte; anything else (or long) by buf.write, as UTF-8. */
  string(key: number, s: string): void {
    const start = this.begin(key);
    if (s.length <= SHORT) {
      let i = 0;
      for (; i < s.length; i++) {
        const c = s.charCodeAt(i);
        if (c > 0x7f) break;
        this.buf[this.pos++] = c;
      }
      if (i === s.length) {
        this.end(start);
        return;
      }
      this.pos = start;
    }
    const n = this.buf.write(s, this.pos, 'utf8');
    // buf.write stops at the buffer's end without a word: a bound too low must not become a cut string.
    if (n !== Buffer.byteLength(s)) throw outgrew();
    this.pos += n;
    this.end(start);
  }

  header(field: number, h: WireHeader): void {
    const start = this.begin((field << 3) | LEN);
    this.name(h.key);
    this.string((2 << 3) | LEN, h.value);
    this.end(start);
  }

  /** A header's name field: the same few names (the config's) in every response, so their bytes are kept. */
  private name(key: string): void {
    const known = NAMES.get(key);
    if (known !== undefined) {
      this.buf.set(known, this.pos);
      this.pos += known.length;
      return;
    }
    const from = this.pos;
    this.string((1 << 3) | LEN, key);
    if (NAMES.size < MAX_NAMES && this.pos - from <= SHORT) NAMES.set(key, Buffer.from(this.buf.subarray(from, this.pos)));
  }

  status(s: WireStatus): void {
    const start = this.begin((2 << 3) | LEN);
    this.buf[this.pos++] = (1 << 3) | VARINT;
    this.varint(s.code);
    if (s.current_limit != null) {
      const l = s.current_limit;
      const limit = this.begin((2 << 3) | LEN);
      this.buf[this.pos++] = (1 << 3) | VARINT;
      this.varint(l.requests_per_unit);
      this.buf[this.pos++] = (2 << 3) | VARINT;
      this.varint(l.unit);
      this.string((3 << 3) | LEN, l.name);
      this.end(limit);
    }
    this.buf[this.pos++] = (3 << 3) | VARINT;
    this.varint(s.limit_remaining);
    if (s.duration_until_reset != null) {
      const d = s.duration_until_reset;
      const duration = this.begin((4 << 3) | LEN);
      this.buf[this.pos++] = (1 << 3) | VARINT;
      this.varint(d.seconds);
      this.buf[this.pos++] = (2 << 3) | VARINT;
      this.varint(d.nanos);
      this.end(duration);
    }
    this.end(start);
  }
}

/** A write past the scratch buffer: dropped by the typed array, or cut short by write and copy. Thrown, so the
 * call is answered INTERNAL rather than with a corrupt message; it means `bound` is wrong. */
const outgrew = (): RangeError => new RangeError('a RateLimitResponse outgrew its bound');

/** The most bytes a string's field can take: its tag, a length of up to 5 bytes, 3 UTF-8 bytes a UTF-16 unit. */
const stringBound = (s: string): number => 6 + 3 * s.length;

/** The most bytes `m` can take, from string lengths alone (no pass over their characters). */
export function bound(m: WireResponse): number {
  // Per status: 3 tags and lengths, 3 varints of up to 10 bytes, a limit of 3 more, a duration of 2 more.
  let n = 32 + (m.raw_body?.length ?? 0);
  for (const s of m.statuses ?? NONE) n += 130 + (s.current_limit ? stringBound(s.current_limit.name) : 0);
  for (const list of [m.response_headers_to_add ?? NONE, m.request_headers_to_add ?? NONE])
    for (const h of list) n += 12 + stringBound(h.key) + stringBound(h.value);
  return n;
}

/** Fields of RateLimitResponse that Tollgate never sets: a response with any of them goes to protobufjs. */
interface RarelySet {
  quota?: unknown;
  dynamic_metadata?: unknown;
  statuses?: { quota?: unknown }[];
  response_headers_to_add?: { raw_value?: unknown }[];
  request_headers_to_add?: { raw_value?: unknown }[];
}

/** Whether encodeRateLimitResponse writes every field `m` has. */
export function encodable(m: WireResponse): boolean {
  const r = m as RarelySet;
  if (r.quota != null || r.dynamic_metadata != null) return false;
  for (const s of r.statuses ?? []) if (s.quota != null) return false;
  for (const h of r.response_headers_to_add ?? []) if (h.raw_value != null) return false;
  for (const h of r.request_headers_to_add ?? []) if (h.raw_value != null) return false;
  return true;
}

const NONE: never[] = [];

/** Encodes a RateLimitResponse as protobufjs does for the same object: fields in number order, a scalar
 * present in the object written even when zero, empty repeated fields left out. Only the fields Tollgate
 * sets (see encodable). `framed`: after a gRPC message prefix. */
export function encodeRateLimitResponse(m: WireResponse, framed = false): Buffer {
  const statuses = m.statuses ?? NONE;
  const response = m.response_headers_to_add ?? NONE;
  const request = m.request_headers_to_add ?? NONE;
  const most = bound(m);
  if (most > scratch.length) scratch = Buffer.allocUnsafeSlow(most);
  const w = new Writer(scratch);
  if (m.overall_code != null) {
    w.buf[w.pos++] = (1 << 3) | VARINT;
    w.varint(m.overall_code);
  }
  for (const s of statuses) w.status(s);
  for (const h of response) w.header(3, h);
  for (const h of request) w.header(4, h);
  if (m.raw_body != null) {
    w.buf[w.pos++] = (5 << 3) | LEN;
    w.varint(m.raw_body.length);
    if (m.raw_body.copy(w.buf, w.pos) !== m.raw_body.length) throw outgrew();
    w.pos += m.raw_body.length;
  }
  // A write past the scratch buffer is dropped by the typed array: a bound too low would be a corrupt answer.
  if (w.pos > scratch.length) throw outgrew();
  // Copied out of the scratch buffer either way; framed, after the prefix in the same buffer.
  const body = scratch.subarray(0, w.pos);
  return framed ? withGrpcPrefix(body) : Buffer.from(body);
}

/** A message after its gRPC prefix (flag 0: not compressed; its length, big-endian), in one new buffer. */
export function withGrpcPrefix(body: Buffer): Buffer {
  const frame = Buffer.allocUnsafe(5 + body.length);
  frame[0] = 0;
  frame.writeUInt32BE(body.length, 1);
  body.copy(frame, 5);
  return frame;
}
