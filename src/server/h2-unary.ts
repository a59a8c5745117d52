import type { IncomingHttpHeaders, ServerHttp2Stream, ServerStreamResponseOptions } from 'node:http2';
import { gunzip, inflate } from 'node:zlib';
import { status } from '@grpc/grpc-js';

/** One unary gRPC call served on node:http2 directly (PROTOCOL-HTTP2.md), for the method the service answers
 * most (hot-path.ts): what grpc-js does per call, without its interceptor chain, Metadata objects, decoder
 * state machine and per-call timers. Statuses, messages and limits are grpc-js 1.14's (server-interceptors.js),
 * so a client sees the same answers from either server; no request text is echoed in a grpc-message. */

/** grpc-js's default receive limit (grpc.max_receive_message_length): 4 MiB. */
export const MAX_RECEIVE_BYTES = 4 * 1024 * 1024;

/** No grpc-encoding: its absence means identity (PROTOCOL-HTTP2.md), one header fewer to write per call. */
const RESPONSE_HEADERS = {
  ':status': 200,
  'content-type': 'application/grpc+proto',
  'grpc-accept-encoding': 'identity,deflate,gzip',
};
/** gRPC has no use for the date header node:http2 adds to every response by default: `sendDate: false`, which
 * Node 20, 22 and 24 read in respond() (processHeaders) though @types/node does not declare it there. */
const NO_DATE = { waitForTrailers: true, sendDate: false } as ServerStreamResponseOptions;
const NO_DATE_END = { endStream: true, sendDate: false } as ServerStreamResponseOptions;
const OK_TRAILERS = { 'grpc-status': '0', 'grpc-message': 'OK' };
/** grpc-timeout: up to 8 digits and a unit (grpc-js's DEADLINE_REGEX, unanchored as there), in ms per unit. */
const TIMEOUT = /(\d{1,8})\s*([HMSmun])/;
/** The longest a timer waits (setTimeout's bound); a longer deadline is as good as none. */
const MAX_TIMER_MS = 2 ** 31 - 1;
const UNIT_MS: Record<string, number> = { H: 3_600_000, M: 60_000, S: 1000, m: 1, u: 0.001, n: 0.000001 };

/** Listeners shared by every stream, so a call allocates none of its own for them (an emitter calls its
 * listeners with `this` set to itself). */
function sendOkTrailers(this: ServerHttp2Stream): void {
  this.sendTrailers(OK_TRAILERS);
}
function ignore(): void {}

/** A call's answer, once: a message and OK, or a status alone (trailers-only). Later answers are dropped, as is any
 * answer to a call its client cancelled or whose deadline passed (DEADLINE_EXCEEDED was sent then). */
export class UnaryCall {
  /** When the client stops waiting, ms since the epoch (Infinity without grpc-timeout). */
  readonly deadline: number;
  private answered = false;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly stream: ServerHttp2Stream,
    readonly headers: IncomingHttpHeaders,
    timeoutMs: number,
  ) {
    this.deadline = Number.isFinite(timeoutMs) ? Date.now() + timeoutMs : Infinity;
    // From the headers on, as grpc-js: a body that never ends is answered at the deadline, and dropped after.
    if (timeoutMs >= MAX_TIMER_MS || !Number.isFinite(timeoutMs)) return;
    this.timer = setTimeout(() => this.fail(status.DEADLINE_EXCEEDED, 'Deadline exceeded'), timeoutMs);
    stream.once('close', () => this.finish()); // a client gone: its timer with it
  }

  /** Whether an answer would still reach anyone. */
  get open(): boolean {
    return !this.answered && !this.stream.destroyed && !this.stream.closed;
  }

  /** `frame`: one message with its gRPC prefix (rls-encode.ts writes it so). */
  reply(frame: Buffer): void {
    if (!this.open) return;
    this.finish();
    const stream = this.stream;
    stream.respond(RESPONSE_HEADERS, NO_DATE);
    // 'on', not 'once' (no wrapper), and one function for every stream: the event comes once, after the frame.
    stream.on('wantTrailers', sendOkTrailers);
    stream.end(frame);
  }

  fail(code: status, details: string): void {
    if (!this.open) return;
    this.finish();
    const headers = { ':status': 200, 'content-type': 'application/grpc+proto', 'grpc-status': String(code), 'grpc-message': encodeURI(details) };
    this.stream.respond(headers, NO_DATE_END);
  }

  private finish(): void {
    this.answered = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }
}

/** Reads a unary call's one message and hands it to `onMessage` with the call to answer, or answers itself
 * what is not a call: another content type (415, as grpc-js), an unreadable grpc-timeout, no message or two,
 * a message over `maxBytes` (before or after decompression), an encoding it does not know. */
export function serveUnary(
  stream: ServerHttp2Stream,
  headers: IncomingHttpHeaders,
  maxBytes: number,
  onMessage: (message: Buffer, call: UnaryCall) => void,
): void {
  stream.on('error', ignore); // a reset stream; 'close' follows, and the call is no longer open
  const type = headers['content-type'];
  if (typeof type !== 'string' || !type.startsWith('application/grpc')) {
    stream.respond({ ':status': 415 }, { endStream: true });
    return;
  }
  const timeout = headers['grpc-timeout'];
  const match = typeof timeout === 'string' ? TIMEOUT.exec(timeout) : null;
  const call = new UnaryCall(stream, headers, match ? Number(match[1]) * UNIT_MS[match[2]!]! : Infinity);
  if (timeout !== undefined && !match) {
    call.fail(status.INTERNAL, `Invalid grpc-timeout value (${String(timeout).length} characters)`);
    return;
  }
  readBody(stream, call, maxBytes, (framer) => unframe(framer, call, maxBytes, onMessage));
}

/** The request's one message as it arrives: the 5-byte prefix first, its length checked at once, the message
 * copied into one buffer of that length (so a client sending a byte a DATA frame costs one buffer, not millions),
 * bytes past it only noted. */
class Framer {
  /** The prefix, when it comes in pieces; the usual whole message in one chunk needs no buffer of its own. */
  private head: Buffer | undefined;
  private flag = 0;
  private headBytes = 0;
  private got = 0;
  message: Buffer | undefined;
  /** Bytes came after the message: a second one. */
  extra = false;

  constructor(private readonly maxBytes: number) {}

  /** Takes a chunk; returns the declared length when it is over maxBytes (nothing more is to be taken then). */
  push(chunk: Buffer): number | undefined {
    // The usual case, a whole message in one chunk: kept as it is, no copy.
    if (this.headBytes === 0 && chunk.length >= 5 && chunk.length === 5 + chunk.readUInt32BE(1) && chunk.length - 5 <= this.maxBytes) {
      this.flag = chunk[0]!;
      this.headBytes = 5;
      this.message = chunk.subarray(5);
      this.got = this.message.length;
      return undefined;
    }
    let at = 0;
    if (this.headBytes < 5) {
      at = Math.min(5 - this.headBytes, chunk.length);
      this.head ??= Buffer.alloc(5);
      chunk.copy(this.head, this.headBytes, 0, at);
      this.headBytes += at;
      if (this.headBytes < 5) return undefined;
      this.flag = this.head[0]!;
      const length = this.head.readUInt32BE(1);
      if (length > this.maxBytes) return length;
      this.message = Buffer.allocUnsafe(length);
    }
    const n = Math.min(this.message!.length - this.got, chunk.length - at);
    if (n > 0) this.got += chunk.copy(this.message!, this.got, at, at + n);
    if (chunk.length - at > n) this.extra = true;
    return undefined;
  }

  /** gRPC's compressed flag: 1, and only 1, says the message is compressed (as grpc-js reads it). */
  get compressed(): boolean {
    return this.flag === 1;
  }

  get complete(): boolean {
    return this.message !== undefined && this.got === this.message.length;
  }
}

/** Reads the body into a Framer; past one message of `maxBytes` (declared, or sent), RESOURCE_EXHAUSTED and the
 * rest dropped as it comes. */
function readBody(stream: ServerHttp2Stream, call: UnaryCall, maxBytes: number, done: (framer: Framer) => void): void {
  const framer = new Framer(maxBytes);
  let size = 0;
  stream.on('data', (chunk: Buffer) => {
    if (!call.open) return;
    size += chunk.length;
    const over = size > maxBytes + 5 ? size - 5 : framer.push(chunk);
    if (over === undefined) return;
    // The status ends this side; what the client still sends is read and dropped (as grpc-js does), nothing held.
    // Not RST_STREAM at once: Node 22 may send it before the status, which the client then never sees.
    call.fail(status.RESOURCE_EXHAUSTED, `Received message larger than max (${over} vs ${maxBytes})`);
  });
  stream.once('end', () => {
    if (call.open) done(framer);
  });
}

/** The one message of a body, decompressed if its flag says so. */
function unframe(framer: Framer, call: UnaryCall, maxBytes: number, onMessage: (message: Buffer, call: UnaryCall) => void): void {
  if (!framer.complete) {
    // No message, or the stream ended inside it: grpc-js never sees a message, and says so.
    call.fail(status.UNIMPLEMENTED, 'Received no request message for unary method');
    return;
  }
  if (framer.extra) {
    call.fail(status.UNIMPLEMENTED, 'Received a second request message for unary method');
    return;
  }
  const message = framer.message!;
  const encoding = call.headers['grpc-encoding'];
  // The compressed flag with no encoding, or identity: the bytes as they are (grpc-js's identity handler).
  if (!framer.compressed || encoding === undefined || encoding === 'identity') {
    onMessage(message, call);
    return;
  }
  const inflater = encoding === 'gzip' ? gunzip : encoding === 'deflate' ? inflate : undefined;
  if (!inflater) {
    const name = typeof encoding === 'string' ? `a ${encoding.length}-character encoding` : 'no encoding';
    call.fail(status.UNIMPLEMENTED, `Received message compressed with unsupported encoding (${name})`);
    return;
  }
  inflater(message, { maxOutputLength: maxBytes }, (err, plain) => {
    if (!err) {
      onMessage(plain, call);
      return;
    }
    if (err instanceof RangeError || (err as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE')
      call.fail(status.RESOURCE_EXHAUSTED, `Received message that decompresses to a size larger than ${maxBytes}`);
    else call.fail(status.INTERNAL, 'Failed to decompress message');
  });
}
