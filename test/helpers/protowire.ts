/** A minimal protobuf wire-format encoder and decoder, written from the encoding spec and independent of
 * protobufjs, to prove the field numbers in proto/ against what Envoy puts on the wire. */

export function varint(n: number | bigint): number[] {
  let v = BigInt(n);
  const out: number[] = [];
  do {
    let byte = Number(v & 0x7fn);
    v >>= 7n;
    if (v > 0n) byte |= 0x80;
    out.push(byte);
  } while (v > 0n);
  return out;
}

export const enc = {
  varint: (field: number, n: number | bigint): number[] => [...varint((field << 3) | 0), ...varint(n)],
  bytes: (field: number, data: number[] | Uint8Array): number[] => [...varint((field << 3) | 2), ...varint(data.length), ...data],
  string: (field: number, s: string): number[] => enc.bytes(field, [...Buffer.from(s, 'utf8')]),
  message: (field: number, ...parts: number[][]): number[] => enc.bytes(field, parts.flat()),
};

export interface WireField {
  field: number;
  wireType: number;
  /** varint value, or raw bytes for length-delimited fields */
  value: bigint | Buffer;
}

export function decode(buf: Buffer): WireField[] {
  const out: WireField[] = [];
  let pos = 0;
  const readVarint = (): bigint => {
    let result = 0n;
    let shift = 0n;
    for (;;) {
      const b = buf[pos++]!;
      result |= BigInt(b & 0x7f) << shift;
      if ((b & 0x80) === 0) return result;
      shift += 7n;
    }
  };
  while (pos < buf.length) {
    const tag = Number(readVarint());
    const field = tag >> 3;
    const wireType = tag & 7;
    if (wireType === 0) out.push({ field, wireType, value: readVarint() });
    else if (wireType === 2) {
      const len = Number(readVarint());
      out.push({ field, wireType, value: buf.subarray(pos, pos + len) });
      pos += len;
    } else throw new Error(`wire type ${wireType} not expected in these messages`);
  }
  return out;
}

/** The fields with a number, for assertions. */
export function fields(buf: Buffer, field: number): WireField[] {
  return decode(buf).filter((f) => f.field === field);
}

export function only(buf: Buffer, field: number): WireField {
  const all = fields(buf, field);
  if (all.length !== 1) throw new Error(`expected one field ${field}, found ${all.length}`);
  return all[0]!;
}
