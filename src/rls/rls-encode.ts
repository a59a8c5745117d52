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

const lenSize = (len: number): number => varintSize(len) + len;

/** Strings up to this many characters are measured and written in JS: the headers' names and numbers a response
 * carries cost less so than in a call to Buffer.byteLength and buf.write (a native call each, ~14 a response). */
const SHORT = 64;

/** UTF-8 bytes of `s`; equal to its length exactly when every character is ASCII (any other takes 2 or more). */
function utf8Length(s: string): number {
  if (s.length > SHORT) return Buffer.byteLength(s);
  for (let i = 0; i < s.length; i++) if (s.charCodeAt(i) > 0x7f) return Buffer.byteLength(s);
  return s.length;
}

/** The sizes the writer needs (nested message lengths, string byte lengths), measured once in the sizing
 * pass and pushed in the order the writer reads them; reused from call to call (encoding is synchronous). */
const SIZES: number[] = new Array<number>(64).fill(0);
/** How many of SIZES this call has pushed: counted, not truncated with `length = 0`, which drops the array's
 * backing store and makes the next pushes allocate it again. */
let sized = 0;

function pushSize(n: number): void {
  SIZES[sized++] = n;
}

/** A status's size; pushes [status, limit, name] sizes (limit and name only when it has a limit). */
function sizeStatus(s: WireStatus): number {
  let n = 1 + varintSize(s.code) + 1 + varintSize(s.limit_remaining);
  const at = sized++;
  if (s.current_limit != null) {
    const l = s.current_limit;
    const name = utf8Length(l.name);
    const limit = 1 + varintSize(l.requests_per_unit) + 1 + varintSize(l.unit) + 1 + lenSize(name);
    pushSize(limit);
    pushSize(name);
    n += 1 + lenSize(limit);
  }
  if (s.duration_until_reset != null) n += 1 + lenSize(durationSize(s.duration_until_reset));
  SIZES[at] = n;
  return n;
}

function durationSize(d: NonNullable<WireStatus['duration_until_reset']>): number {
  return 1 + varintSize(d.seconds) + 1 + varintSize(d.nanos);
}

/** A header's size; pushes [header, key, value] sizes. */
function sizeHeader(h: WireHeader): number {
  const key = utf8Length(h.key);
  const value = utf8Length(h.value);
  const n = 1 + lenSize(key) + 1 + lenSize(value);
  pushSize(n);
  pushSize(key);
  pushSize(value);
  return n;
}

/** Writes into a Buffer sized exactly beforehand, taking lengths from SIZES in order. */
class Writer {
  pos = 0;
  private next = 0;
  constructor(readonly buf: Buffer) {}

  private size(): number {
    return SIZES[this.next++]!;
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

  string(s: string): void {
    const len = this.size();
    this.varint(len);
    if (len !== s.length || len > SHORT) {
      this.pos += this.buf.write(s, this.pos, len, 'utf8');
      return;
    }
    for (let i = 0; i < len; i++) this.buf[this.pos++] = s.charCodeAt(i);
  }

  header(field: number, h: WireHeader): void {
    this.buf[this.pos++] = (field << 3) | LEN;
    this.varint(this.size());
    this.buf[this.pos++] = (1 << 3) | LEN;
    this.string(h.key);
    this.buf[this.pos++] = (2 << 3) | LEN;
    this.string(h.value);
  }

  status(s: WireStatus): void {
    this.buf[this.pos++] = (2 << 3) | LEN;
    this.varint(this.size());
    this.buf[this.pos++] = (1 << 3) | VARINT;
    this.varint(s.code);
    if (s.current_limit != null) {
      const l = s.current_limit;
      this.buf[this.pos++] = (2 << 3) | LEN;
      this.varint(this.size());
      this.buf[this.pos++] = (1 << 3) | VARINT;
      this.varint(l.requests_per_unit);
      this.buf[this.pos++] = (2 << 3) | VARINT;
      this.varint(l.unit);
      this.buf[this.pos++] = (3 << 3) | LEN;
      this.string(l.name);
    }
    this.buf[this.pos++] = (3 << 3) | VARINT;
    this.varint(s.limit_remaining);
    if (s.duration_until_reset != null) {
      const d = s.duration_until_reset;
      this.buf[this.pos++] = (4 << 3) | LEN;
      this.varint(durationSize(d));
      this.buf[this.pos++] = (1 << 3) | VARINT;
      this.varint(d.seconds);
      this.buf[this.pos++] = (2 << 3) | VARINT;
      this.varint(d.nanos);
    }
  }
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
  sized = 0;
  let size = m.overall_code != null ? 1 + varintSize(m.overall_code) : 0;
  for (const s of statuses) size += 1 + lenSize(sizeStatus(s));
  for (const h of response) size += 1 + lenSize(sizeHeader(h));
  for (const h of request) size += 1 + lenSize(sizeHeader(h));
  if (m.raw_body != null) size += 1 + lenSize(m.raw_body.length);
  // framed: the gRPC length prefix first (flag 0, big-endian length), so the message is sent without a copy.
  const w = new Writer(Buffer.allocUnsafe(framed ? 5 + size : size));
  if (framed) {
    w.buf[0] = 0;
    w.buf.writeUInt32BE(size, 1);
    w.pos = 5;
  }
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
    w.pos += m.raw_body.copy(w.buf, w.pos);
  }
  return w.buf;
}
