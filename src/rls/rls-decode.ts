/** RateLimitRequest, decoded by hand (rls-codec.ts says why). */
import { isUtf8 } from 'node:buffer';
import { asciiString } from './ascii-strings.js';
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

/** Protobuf wire types. */
export const VARINT = 0;
export const FIXED64 = 1;
export const LEN = 2;
export const FIXED32 = 5;

/** Where the reader is, shared by every reader (one per request otherwise, grown on its first field). A
 * request's nesting is at most five deep (descriptors, an index, entries, an index, a field). */
const PATH: (string | number)[] = new Array<string | number>(8).fill('');

/** A cursor over the request's bytes. `end` is the end of the message being read (nested messages narrow
 * it); PATH, to `depth`, says where the cursor is, for the one message a failure produces; `fail` records the first
 * problem and makes every loop stop. Nothing is allocated per field on the way. */
export class Reader {
  pos = 0;
  end: number;
  problem: string | undefined;
  bounds: DecodeBounds = UNBOUNDED;
  /** How deep `PATH` is for this reader (decoding is synchronous: one reader at a time uses it). */
  private depth = 0;
  constructor(readonly buf: Buffer) {
    this.end = buf.length;
  }

  enter(name: string | number): void {
    PATH[this.depth++] = name;
  }

  leave(): void {
    this.depth--;
  }

  /** Set by failBound: the problem is a count past its bound, not malformed bytes. */
  overBound = false;

  failBound(problem: string): void {
    if (this.problem === undefined) this.overBound = true;
    this.fail(problem);
  }

  fail(problem: string): void {
    if (this.problem === undefined) {
      const where = PATH.slice(0, this.depth)
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
    return asciiString(this.buf, start, end);
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
      else if (r.is(tag, LEN)) req.descriptors = append(req.descriptors, r.nested(descriptor));
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

/** `list` with `x` at its end: a first element as a one-element array, where a push onto `[]` would allocate
 * room for 17 (most requests have one descriptor of one or two entries). */
function append<T>(list: T[], x: T): T[] {
  if (list.length === 0) return [x];
  list.push(x);
  return list;
}

function descriptor(r: Reader): WireDescriptor {
  const d: WireDescriptor = { entries: [], limit: null, hits_addend: null, is_negative_hits: false };
  for (let tag = r.tag(); tag !== 0; tag = r.tag()) {
    const field = Math.floor(tag / 8);
    if (field === 1) {
      r.enter('entries');
      r.enter(d.entries.length);
      if (d.entries.length >= r.bounds.maxEntries) r.failBound(`more than the maximum of ${r.bounds.maxEntries} entries`);
      else if (r.is(tag, LEN)) d.entries = append(d.entries, r.nested(entry));
      r.leave();
    } else if (field === 2) {
      r.enter('limit');
      if (r.is(tag, LEN)) d.limit = r.nested(override);
    } else if (field === 3) {
      r.enter('hits_addend');
      if (r.is(tag, LEN)) d.hits_addend = r.nested(uint64Value);
    } else if (field === 4) {
      // Envoy 1.38's refund flag: a bool, which protobuf reads as any varint that is not 0.
      r.enter('is_negative_hits');
      if (r.is(tag, VARINT)) d.is_negative_hits = r.uint32() !== 0;
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
