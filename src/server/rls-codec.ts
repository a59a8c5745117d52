/** The two RLS messages on the hot path, read and written by hand: RateLimitRequest decoded straight into
 * the plain object the handler reads (one pass that also rejects what is not a well-formed request), and
 * RateLimitResponse written straight into one Buffer. protobufjs builds message objects, Readers and
 * Writers per call; this does neither. Field numbers are the .proto's (proto/envoy/...); the property test
 * in test/unit/rls-codec.test.ts holds both directions to protobufjs byte for byte. */
import { isUtf8 } from 'node:buffer';
import type { WireHeader, WireResponse, WireStatus } from '../response/wire.js';
import type { WireDescriptor, WireRequest } from './request.js';

/** Bytes that are not a RateLimitRequest, or one past a count bound. `reason` names the problem and where,
 * never the bytes. */
export class UndecodableRequest {
  constructor(
    readonly reason: string,
    /** A well-formed message so far, refused for holding more descriptors or entries than the bounds. */
    readonly overBound = false,
  ) {}
}

/** Counts refused while decoding, as soon as one is passed: a 4 MiB message can hold two million empty
 * descriptors, and building them all before counting them costs the event loop most of a second. */
export interface DecodeBounds {
  maxDescriptors: number;
  maxEntries: number;
}

const UNBOUNDED: DecodeBounds = { maxDescriptors: Infinity, maxEntries: Infinity };

const VARINT = 0;
const FIXED64 = 1;
const LEN = 2;
const FIXED32 = 5;

/** A cursor over the request's bytes. `end` is the end of the message being read (nested messages narrow
 * it); `path` says where the cursor is, for the one message a failure produces; `fail` records the first
 * problem and makes every loop stop. Nothing is allocated per field on the way. */
class Reader {
  pos = 0;
  end: number;
  problem: string | undefined;
  bounds: DecodeBounds = UNBOUNDED;
  private readonly path: (string | number)[] = [];
  constructor(readonly buf: Buffer) {
    this.end = buf.length;
  }

  enter(name: string | number): void {
    this.path.push(name);
  }

  leave(): void {
    this.path.pop();
  }

  /** Set by failBound: the problem is a count past its bound, not malformed bytes. */
  overBound = false;

  failBound(problem: string): void {
    if (this.problem === undefined) this.overBound = true;
    this.fail(problem);
  }

  fail(problem: string): void {
    if (this.problem === undefined) {
      const where = this.path
        .map((p) => (typeof p === 'number' ? `[${p}]` : `.${p}`))
        .join('')
        .slice(1);
      this.problem = `${where || 'message'}: ${problem}`;
    }
    this.pos = this.end;
  }

  /** A varint of at most `maxBytes` bytes as a number (exact to 2^53); NaN, with the problem set, if not.
   * A 32-bit field may also take 10 bytes (a negative int32 as protobuf writes it), as protobufjs reads. */
  varint(maxBytes: number): number {
    let value = 0;
    let scale = 1;
    for (let i = 0; i < 10 && this.pos < this.end; i++) {
      const b = this.buf[this.pos++]!;
      value += (b & 0x7f) * scale;
      scale *= 128;
      if ((b & 0x80) === 0) {
        if (i < maxBytes || (maxBytes === 5 && i === 9)) return value;
        break;
      }
    }
    this.fail('malformed varint');
    return NaN;
  }

  /** Where a length-delimited value ends (its bytes start at pos). */
  length(): number {
    const len = this.varint(5);
    if (len > this.end - this.pos) this.fail(`declared length ${len} exceeds the ${this.end - this.pos} bytes left`);
    return this.pos + len;
  }

  string(): string {
    const end = this.length();
    if (this.problem !== undefined) return '';
    const start = this.pos;
    this.pos = end;
    for (let i = start; i < end; i++) {
      if (this.buf[i]! < 0x80) continue;
      const bytes = this.buf.subarray(start, end);
      return isUtf8(bytes) ? this.buf.toString('utf8', start, end) : escapeBytes(bytes);
    }
    return this.buf.toString('latin1', start, end);
  }

  /** Skips a field this decoder does not read, as protobuf says; groups are obsolete and refused. */
  skip(wire: number): void {
    if (wire === VARINT) this.varint(10);
    else if (wire === FIXED64 || wire === FIXED32) {
      this.pos += wire === FIXED64 ? 8 : 4;
      if (this.pos > this.end) this.fail('truncated fixed-size value');
    } else if (wire === LEN) this.pos = this.length();
    else this.fail(`unsupported wire type ${wire}`);
  }

  /** The next field's tag (field number × 8 + wire type), or 0 at the end of the message. */
  tag(): number {
    if (this.pos >= this.end || this.problem !== undefined) return 0;
    const start = this.pos;
    const tag = this.varint(5);
    if (this.problem !== undefined) return 0;
    if (tag > 0xffff_ffff || tag < 8) {
      this.fail(`malformed field tag at byte ${start}`);
      return 0;
    }
    return tag;
  }

  /** Whether a known field came with its declared wire type. */
  is(tag: number, wire: number): boolean {
    if (tag % 8 === wire) return true;
    this.fail(`wire type ${tag % 8}, expected ${wire}`);
    return false;
  }

  /** Reads the nested message whose length comes next with `read`, then returns to the outer one. */
  nested<T>(read: (r: Reader) => T): T {
    const end = this.length();
    const outer = this.end;
    if (this.problem === undefined) this.end = end;
    const value = read(this);
    this.end = outer;
    if (this.problem !== undefined) this.pos = outer;
    return value;
  }

  /** A uint32 or enum field: the low 32 bits of the varint, as protobuf reads them, exactly. The varint may
   * take 10 bytes (any 64-bit value); a double of it would have lost the low bits past 2^53, so they are
   * gathered from the first five bytes with integer arithmetic. */
  uint32(): number {
    const start = this.pos;
    if (Number.isNaN(this.varint(5))) return 0;
    let low = 0;
    for (let i = 0; i < 5 && start + i < this.pos; i++) low += (this.buf[start + i]! & 0x7f) * 2 ** (7 * i);
    return low % 2 ** 32;
  }
}

/** A string field that is not UTF-8, kept distinct: ASCII bytes as themselves, every other byte as a lone
 * surrogate U+DC80…U+DCFF. Decoding UTF-8 never yields a lone surrogate, so no two byte strings share a
 * result, and no such value can equal a configured one. Rejecting the request instead would let it through
 * (Envoy's failure_mode_deny: false): a client could send an Authorization header that is not UTF-8 to skip
 * every limit. fingerprint() hashes these strings apart from all well-formed ones. */
function escapeBytes(bytes: Buffer): string {
  let out = '';
  for (const b of bytes) out += String.fromCharCode(b < 0x80 ? b : 0xdc00 + b);
  return out;
}

/** Decodes a RateLimitRequest with proto3 defaults (keepCase names, numbers for enums and longs), or says why
 * the bytes are not one. A field that appears twice: the last wins, as in protobufjs. */
export function decodeRateLimitRequest(buf: Buffer, bounds: DecodeBounds = UNBOUNDED): WireRequest | UndecodableRequest {
  const r = new Reader(buf);
  r.bounds = bounds;
  const req: WireRequest = { domain: '', descriptors: [], hits_addend: 0 };
  for (let tag = r.tag(); tag !== 0; tag = r.tag()) {
    const field = Math.floor(tag / 8);
    if (field === 1) {
      r.enter('domain');
      if (r.is(tag, LEN)) req.domain = r.string();
    } else if (field === 2) {
      r.enter('descriptors');
      r.enter(req.descriptors.length);
      if (req.descriptors.length >= bounds.maxDescriptors) r.failBound(`more than the maximum of ${bounds.maxDescriptors} descriptors`);
      else if (r.is(tag, LEN)) req.descriptors.push(r.nested(descriptor));
      r.leave();
    } else if (field === 3) {
      r.enter('hits_addend');
      if (r.is(tag, VARINT)) req.hits_addend = r.uint32();
    } else {
      r.enter(`field ${field}`);
      r.skip(tag % 8);
    }
    r.leave();
  }
  return r.problem === undefined ? req : new UndecodableRequest(r.problem, r.overBound);
}

function descriptor(r: Reader): WireDescriptor {
  const d: WireDescriptor = { entries: [], limit: null, hits_addend: null };
  for (let tag = r.tag(); tag !== 0; tag = r.tag()) {
    const field = Math.floor(tag / 8);
    if (field === 1) {
      r.enter('entries');
      r.enter(d.entries.length);
      if (d.entries.length >= r.bounds.maxEntries) r.failBound(`more than the maximum of ${r.bounds.maxEntries} entries`);
      else if (r.is(tag, LEN)) d.entries.push(r.nested(entry));
      r.leave();
    } else if (field === 2) {
      r.enter('limit');
      if (r.is(tag, LEN)) d.limit = r.nested(override);
    } else if (field === 3) {
      r.enter('hits_addend');
      if (r.is(tag, LEN)) d.hits_addend = r.nested(uint64Value);
    } else {
      r.enter(`field ${field}`);
      r.skip(tag % 8);
    }
    r.leave();
  }
  return d;
}

function entry(r: Reader): { key: string; value: string } {
  const e = { key: '', value: '' };
  for (let tag = r.tag(); tag !== 0; tag = r.tag()) {
    const field = Math.floor(tag / 8);
    r.enter(field === 1 ? 'key' : field === 2 ? 'value' : `field ${field}`);
    if (field === 1) {
      if (r.is(tag, LEN)) e.key = r.string();
    } else if (field === 2) {
      if (r.is(tag, LEN)) e.value = r.string();
    } else r.skip(tag % 8);
    r.leave();
  }
  return e;
}

function override(r: Reader): { requests_per_unit: number; unit: number } {
  const o = { requests_per_unit: 0, unit: 0 };
  for (let tag = r.tag(); tag !== 0; tag = r.tag()) {
    const field = Math.floor(tag / 8);
    r.enter(field === 1 ? 'requests_per_unit' : field === 2 ? 'unit' : `field ${field}`);
    if (field === 1) {
      if (r.is(tag, VARINT)) o.requests_per_unit = r.uint32();
    } else if (field === 2) {
      if (r.is(tag, VARINT)) o.unit = r.uint32() | 0;
    } else r.skip(tag % 8);
    r.leave();
  }
  return o;
}

function uint64Value(r: Reader): { value: number } {
  const h = { value: 0 };
  for (let tag = r.tag(); tag !== 0; tag = r.tag()) {
    const field = Math.floor(tag / 8);
    r.enter(field === 1 ? 'value' : `field ${field}`);
    if (field === 1) {
      if (r.is(tag, VARINT)) h.value = r.varint(10);
    } else r.skip(tag % 8);
    r.leave();
  }
  return h;
}

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
 * sets (see encodable). */
export function encodeRateLimitResponse(m: WireResponse): Buffer {
  const statuses = m.statuses ?? NONE;
  const response = m.response_headers_to_add ?? NONE;
  const request = m.request_headers_to_add ?? NONE;
  SIZES.length = 0;
  let size = m.overall_code != null ? 1 + varintSize(m.overall_code) : 0;
  for (const s of statuses) size += 1 + lenSize(sizeStatus(s));
  for (const h of response) size += 1 + lenSize(sizeHeader(h));
  for (const h of request) size += 1 + lenSize(sizeHeader(h));
  if (m.raw_body != null) size += 1 + lenSize(m.raw_body.length);
  const w = new Writer(Buffer.allocUnsafe(size));
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
