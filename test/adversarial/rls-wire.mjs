import http2 from 'node:http2';
import net from 'node:net';

/** The few bytes of the RLS wire the in-flight attacks (inflight-attacks.mjs) need, by hand: a request of any
 * size (lengths as varints), a descriptor's hits_addend and is_negative_hits (rls.proto's RateLimitDescriptor
 * fields 3 and 4), and an answer read back to its codes and remaining counts, so an attack can judge every answer
 * at the pace of a raw HTTP/2 client. A plain .mjs file: the attacks run as processes of their own. */

export const RLS_PATH = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';
export const GRPC = { ':method': 'POST', 'content-type': 'application/grpc', te: 'trailers' };
export const OK = 1;

function varint(n) {
  const out = [];
  let v = n;
  while (v >= 0x80) {
    out.push((v % 0x80) | 0x80);
    v = Math.floor(v / 0x80);
  }
  out.push(v);
  return Buffer.from(out);
}

const bytesField = (n, bytes) => Buffer.concat([varint((n << 3) | 2), varint(bytes.length), bytes]);
const str = (n, s) => bytesField(n, Buffer.from(s));

/** A RateLimitDescriptor field of the request: entries [[key, value]], hits (UInt64Value; undefined: none),
 * negative (is_negative_hits). */
export function descriptor(entries, hits, negative = false) {
  const parts = entries.map(([k, v]) => bytesField(1, Buffer.concat([str(1, k), str(2, v)])));
  if (hits !== undefined) parts.push(bytesField(3, hits === 0 ? Buffer.alloc(0) : Buffer.concat([Buffer.from([0x08]), varint(hits)])));
  if (negative) parts.push(Buffer.from([0x20, 1]));
  return bytesField(2, Buffer.concat(parts));
}

/** A RateLimitRequest of `descriptors` (each from descriptor()), framed for gRPC. */
export function rlsMessage(domain, descriptors) {
  const message = Buffer.concat([str(1, domain), ...descriptors]);
  const head = Buffer.alloc(5);
  head.writeUInt32BE(message.length, 1);
  return Buffer.concat([head, message]);
}

function readVarint(buf, at) {
  let value = 0;
  let scale = 1;
  let pos = at;
  for (;;) {
    const b = buf[pos++];
    if (b === undefined) throw new Error('a varint past the end');
    value += (b & 0x7f) * scale;
    if (b < 0x80) return [value, pos];
    scale *= 0x80;
  }
}

/** The fields of a message, as [number, value] (a varint's number, or a length-delimited field's bytes). */
function fields(buf) {
  const out = [];
  let pos = 0;
  while (pos < buf.length) {
    const [tag, p] = readVarint(buf, pos);
    const type = tag & 7;
    if (type === 0) {
      const [v, q] = readVarint(buf, p);
      out.push([tag >> 3, v]);
      pos = q;
    } else if (type === 2) {
      const [len, q] = readVarint(buf, p);
      out.push([tag >> 3, buf.subarray(q, q + len)]);
      pos = q + len;
    } else if (type === 1 || type === 5) pos = p + (type === 1 ? 8 : 4);
    else throw new Error(`wire type ${type}`);
  }
  return out;
}

/** A RateLimitResponse (without its 5-byte prefix): { overall, statuses: [{ code, remaining }] }. */
export function readAnswer(buf) {
  const answer = { overall: 0, statuses: [] };
  for (const [n, v] of fields(buf)) {
    if (n === 1) answer.overall = v;
    if (n === 2) {
      const s = { code: 0, remaining: 0 };
      for (const [m, w] of fields(v)) {
        if (m === 1) s.code = w;
        if (m === 3) s.remaining = w;
      }
      answer.statuses.push(s);
    }
  }
  return answer;
}

/** One call on a session: { status (grpc-status, or 'reset'/'error'), answer }. */
export function unary(s, framed, headers = {}) {
  return new Promise((resolve) => {
    let req;
    try {
      req = s.request({ ...GRPC, ':path': RLS_PATH, ...headers });
    } catch (err) {
      resolve({ status: `error ${err.code ?? err.message}` });
      return;
    }
    const chunks = [];
    let status;
    req.on('response', (h) => (status = h['grpc-status'] ?? status));
    req.on('trailers', (h) => (status = h['grpc-status'] ?? status));
    req.on('data', (d) => chunks.push(d));
    req.on('error', () => undefined);
    req.on('close', () => {
      const body = Buffer.concat(chunks);
      let answer;
      try {
        answer = status === '0' && body.length >= 5 ? readAnswer(body.subarray(5, 5 + body.readUInt32BE(1))) : undefined;
      } catch (err) {
        status = `undecodable answer: ${err.message}`;
      }
      resolve({ status: status ?? `reset ${req.rstCode}`, answer });
    });
    req.end(framed);
  });
}

/** A connected session from `address` (or the default), or undefined when it could not connect. */
export function connect(port, address) {
  const createConnection = address && (() => net.connect({ host: '127.0.0.1', port, localAddress: address }));
  const s = http2.connect(`http://127.0.0.1:${port}`, createConnection ? { createConnection } : {});
  s.on('error', () => undefined);
  return new Promise((resolve) => {
    s.once('connect', () => resolve(s));
    s.once('close', () => resolve(undefined));
  });
}
