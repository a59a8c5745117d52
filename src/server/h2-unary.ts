import type { Http2Session, IncomingHttpHeaders, ServerHttp2Stream, ServerStreamResponseOptions } from 'node:http2';
import { status } from '@grpc/grpc-js';
import { BUSY, type ByteBudget, Hold } from './byte-budget.js';
import { type InflateFailure, inflateFailure, inflateWithin } from './inflate.js';

/** One unary gRPC call served on node:http2 directly (PROTOCOL-HTTP2.md), for the method the service answers
 * most (hot-path.ts): what grpc-js does per call, without its interceptor chain, Metadata objects, decoder
 * state machine and per-call timers. Statuses, messages and limits are grpc-js 1.14's (server-interceptors.js),
 * so a client sees the same answers from either server; no request text is echoed in a grpc-message. */

/** What a call may hold: its message's largest size (as sent or inflated), the budget its bytes are taken from
 * (port-bounds.ts), and the deadline of a call that names none. */
export interface UnaryLimits {
  maxBytes: number;
  budget: ByteBudget;
  defaultDeadlineMs: number;
}

/** A message buffer starts this small and doubles as bytes arrive, up to its declared length: a declared length
 * costs nothing until its bytes come (grpc-js grows its buffer so too). */
const FIRST_BUFFER_BYTES = 1024;

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
    /** The bytes its message holds, given back when the call ends. */
    readonly hold: Hold,
  ) {
    this.deadline = Number.isFinite(timeoutMs) ? Date.now() + timeoutMs : Infinity;
    stream.once('close', () => this.finish()); // a client gone: its timer and its bytes with it
    // From the headers on, as grpc-js: a body that never ends is answered at the deadline, and dropped after.
    if (timeoutMs >= MAX_TIMER_MS || !Number.isFinite(timeoutMs)) return;
    this.timer = setTimeout(() => this.fail(status.DEADLINE_EXCEEDED, 'Deadline exceeded'), timeoutMs);
  }

  /** The connection it came on. */
  get session(): Http2Session | undefined {
    return this.stream.session;
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
    respondStatus(this.stream, code, details);
  }

  private finish(): void {
    this.answered = true;
    this.hold.release();
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }
}

/** A status alone (trailers-only): `details` is the server's own text, never the request's. */
export function respondStatus(stream: ServerHttp2Stream, code: status, details: string): void {
  const headers = { ':status': 200, 'content-type': 'application/grpc+proto', 'grpc-status': String(code), 'grpc-message': encodeURI(details) };
  stream.respond(headers, NO_DATE_END);
}

/** Milliseconds of a grpc-timeout header, or undefined if it is not one grpc-js would read. */
export function timeoutMs(value: string | string[] | undefined): number | undefined {
  const match = typeof value === 'string' ? TIMEOUT.exec(value) : null;
  return match ? Number(match[1]) * UNIT_MS[match[2]!]! : undefined;
}

/** Reads a unary call's one message and hands it to `onMessage` with the call to answer, or answers itself
 * what is not a call: another content type (415, as grpc-js), an unreadable grpc-timeout, no message or two,
 * a message over `maxBytes` (before or after decompression) or past the byte budget, an encoding it does not
 * know. A call without grpc-timeout gets the server's deadline. */
export function serveUnary(
  stream: ServerHttp2Stream,
  headers: IncomingHttpHeaders,
  limits: UnaryLimits,
  onMessage: (message: Buffer, call: UnaryCall) => void,
): void {
  stream.on('error', ignore); // a reset stream; 'close' follows, and the call is no longer open
  const type = headers['content-type'];
  if (typeof type !== 'string' || !type.startsWith('application/grpc')) {
    stream.respond({ ':status': 415 }, { endStream: true });
    return;
  }
  const timeout = headers['grpc-timeout'];
  const ms = timeoutMs(timeout);
  const hold = new Hold(limits.budget, limits.budget.ledger(stream.session ?? stream));
  const call = new UnaryCall(stream, headers, ms ?? limits.defaultDeadlineMs, hold);
  if (timeout !== undefined && ms === undefined) {
    call.fail(status.INTERNAL, `Invalid grpc-timeout value (${String(timeout).length} characters)`);
    return;
  }
  readBody(stream, call, limits.maxBytes, (framer) => unframe(framer, call, limits.maxBytes, onMessage));
}

/** The request's one message as it arrives: the 5-byte prefix first, its length checked at once, the message
 * copied into one buffer that grows (doubling, up to that length) as its bytes come, each growth taken from the
 * call's hold (so a client sending a byte a DATA frame costs one buffer, not millions, and a declared length that
 * never comes costs nothing), bytes past it only noted. */
class Framer {
  /** The prefix, when it comes in pieces; the usual whole message in one chunk needs no buffer of its own. */
  private head: Buffer | undefined;
  private flag = 0;
  private headBytes = 0;
  private got = 0;
  message: Buffer | undefined;
  /** Bytes came after the message: a second one. */
  extra = false;

  /** The message's declared length. */
  private length = 0;

  constructor(
    private readonly maxBytes: number,
    private readonly hold: Hold,
  ) {}

  /** Takes a chunk; returns the declared length when it is over maxBytes, or 'busy' when the budget cannot hold
   * its bytes (nothing more is to be taken then). */
  push(chunk: Buffer): number | 'busy' | undefined {
    // The usual case, a whole message in one chunk: kept as it is, no copy.
    if (this.headBytes === 0 && chunk.length >= 5 && chunk.length === 5 + chunk.readUInt32BE(1) && chunk.length - 5 <= this.maxBytes) {
      if (!this.hold.take(chunk.length)) return 'busy';
      this.flag = chunk[0]!;
      this.headBytes = 5;
      this.message = chunk.subarray(5);
      this.got = this.length = this.message.length;
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
      this.length = this.head.readUInt32BE(1);
      if (this.length > this.maxBytes) return this.length;
      this.message = Buffer.alloc(0);
    }
    const n = Math.min(this.length - this.got, chunk.length - at);
    if (n > 0) {
      if (!this.room(this.got + n)) return 'busy';
      this.got += chunk.copy(this.message!, this.got, at, at + n);
    }
    if (chunk.length - at > n) this.extra = true;
    return undefined;
  }

  /** Grows the buffer to hold `need` bytes (doubling, capped at the declared length), taking what it adds. */
  private room(need: number): boolean {
    const have = this.message!.length;
    if (need <= have) return true;
    const size = Math.min(this.length, Math.max(need, have * 2, FIRST_BUFFER_BYTES));
    if (!this.hold.take(size - have)) return false;
    const grown = Buffer.allocUnsafe(size);
    this.message!.copy(grown, 0, 0, this.got);
    this.message = grown;
    return true;
  }

  /** gRPC's compressed flag: 1, and only 1, says the message is compressed (as grpc-js reads it). */
  get compressed(): boolean {
    return this.flag === 1;
  }

  get complete(): boolean {
    return this.message !== undefined && this.got === this.length && this.got === this.message.length;
  }
}

/** Reads the body into a Framer; past one message of `maxBytes` (declared, or sent), RESOURCE_EXHAUSTED and the
 * rest dropped as it comes. */
function readBody(stream: ServerHttp2Stream, call: UnaryCall, maxBytes: number, done: (framer: Framer) => void): void {
  const framer = new Framer(maxBytes, call.hold);
  let size = 0;
  stream.on('data', (chunk: Buffer) => {
    if (!call.open) return;
    size += chunk.length;
    const over = size > maxBytes + 5 ? size - 5 : framer.push(chunk);
    if (over === undefined) return;
    // The status ends this side; what the client still sends is read and dropped (as grpc-js does), nothing held.
    // Not RST_STREAM at once: Node 22 may send it before the status, which the client then never sees.
    call.fail(status.RESOURCE_EXHAUSTED, over === 'busy' ? BUSY : `Received message larger than max (${over} vs ${maxBytes})`);
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
    handOver(message, call, onMessage);
    return;
  }
  if (encoding !== 'gzip' && encoding !== 'deflate') {
    const name = typeof encoding === 'string' ? `a ${encoding.length}-character encoding` : 'no encoding';
    call.fail(status.UNIMPLEMENTED, `Received message compressed with unsupported encoding (${name})`);
    return;
  }
  inflateHeld(message, encoding, call, maxBytes, onMessage);
}

/** A compressed message inflated within the call's hold (inflate.ts); its failures as grpc-js words them. */
function inflateHeld(
  message: Buffer,
  encoding: 'gzip' | 'deflate',
  call: UnaryCall,
  maxBytes: number,
  onMessage: (message: Buffer, call: UnaryCall) => void,
): void {
  inflateWithin(message, encoding, call.hold, maxBytes).then(
    (plain) => {
      if (call.open) handOver(plain, call, onMessage);
    },
    (why: InflateFailure) => {
      const failed = inflateFailure(why, maxBytes);
      call.fail(failed.code, failed.details);
    },
  );
}

/** The message to its handler, which decodes it at once: its bytes are given back when that returns. */
function handOver(message: Buffer, call: UnaryCall, onMessage: (message: Buffer, call: UnaryCall) => void): void {
  try {
    onMessage(message, call);
  } finally {
    call.hold.release();
  }
}
