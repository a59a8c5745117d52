import type { WireHeader, WireResponse, WireStatus } from '../response/wire.js';
import { LEN, VARINT } from './rls-decode.js';

/** RateLimitResponse, encoded by hand (rls-codec.ts says why). */

/** Bytes of a varint; a negative int32 takes 10, as protobuf writes it. */
function varintSize(n: number): number {
  if (n < 0) return 10;
  let size = 1;
  while (n >= 128) {
    n = Math.floor(n / 128);
    size++;
  }
  return size;
}

const lenSize = (len: number): number => varintSize(len) + len;

/** The sizes the writer needs (nested message lengths, string byte lengths), measured once in the sizing
 * pass and pushed in the order the writer reads them; reused from call to call (encoding is synchronous). */
const SIZES: number[] = [];

/** A status's size; pushes [status, limit, name] sizes (limit and name only when it has a limit). */
function sizeStatus(s: WireStatus): number {
  let n = 1 + varintSize(s.code) + 1 + varintSize(s.limit_remaining);
  const at = SIZES.push(0) - 1;
  if (s.current_limit != null) {
    const l = s.current_limit;
    const name = Buffer.byteLength(l.name);
    const limit = 1 + varintSize(l.requests_per_unit) + 1 + varintSize(l.unit) + 1 + lenSize(name);
    SIZES.push(limit, name);
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
  const key = Buffer.byteLength(h.key);
  const value = Buffer.byteLength(h.value);
  const n = 1 + lenSize(key) + 1 + lenSize(value);
  SIZES.push(n, key, value);
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
    while (n >= 128) {
      this.buf[this.pos++] = (n % 128) | 0x80;
      n = Math.floor(n / 128);
    }
    this.buf[this.pos++] = n;
  }

  string(s: string): void {
    const len = this.size();
    this.varint(len);
    this.pos += this.buf.write(s, this.pos, len, 'utf8');
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
  SIZES.length = 0;
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
