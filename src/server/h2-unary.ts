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
/** grpc-timeout: up to 8 digits and a unit (grpc-js's DEADLINE_REGEX), in ms per unit. */
const TIMEOUT = /^(\d{1,8})\s*([HMSmun])$/;
const UNIT_MS: Record<string, number> = { H: 3_600_000, M: 60_000, S: 1000, m: 1, u: 0.001, n: 0.000001 };

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
  }

  /** Whether an answer would still reach anyone. */
  get open(): boolean {
    return !this.answered && !this.stream.destroyed && !this.stream.closed;
  }

  /** Waits for an answer that is not ready at once: at the deadline the call ends with DEADLINE_EXCEEDED. */
  await(): void {
    if (!Number.isFinite(this.deadline) || this.timer) return;
    this.timer = setTimeout(() => this.fail(status.DEADLINE_EXCEEDED, 'Deadline exceeded'), Math.max(0, this.deadline - Date.now()));
    this.stream.once('close', () => this.finish()); // a client gone: its timer with it
  }

  /** `frame`: one message with its gRPC prefix (rls-encode.ts writes it so). */
  reply(frame: Buffer): void {
    if (!this.open) return;
    this.finish();
    const stream = this.stream;
    stream.respond(RESPONSE_HEADERS, NO_DATE);
    stream.once('wantTrailers', () => stream.sendTrailers(OK_TRAILERS));
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
  stream.on('error', () => undefined); // a reset stream; 'close' follows, and the call is no longer open
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
  readBody(stream, call, maxBytes, (body) => unframe(body, call, maxBytes, onMessage));
}

/** The request body, as one Buffer; past one message of `maxBytes`, RESOURCE_EXHAUSTED and nothing more read. */
function readBody(stream: ServerHttp2Stream, call: UnaryCall, maxBytes: number, done: (body: Buffer) => void): void {
  let first: Buffer | undefined;
  let more: Buffer[] | undefined;
  let size = 0;
  stream.on('data', (chunk: Buffer) => {
    size += chunk.length;
    if (size > maxBytes + 5) {
      if (call.open) call.fail(status.RESOURCE_EXHAUSTED, `Received message larger than max (${size - 5} vs ${maxBytes})`);
      stream.close(); // RST_STREAM(NO_ERROR) after the status: the client stops sending, nothing more is held
      return;
    }
    if (!first) first = chunk;
    else {
      more ??= [first];
      more.push(chunk);
    }
  });
  stream.once('end', () => {
    if (!call.open) return;
    done(more ? Buffer.concat(more, size) : (first ?? Buffer.alloc(0)));
  });
}

/** The one length-prefixed message of a body, decompressed if its flag says so. */
function unframe(body: Buffer, call: UnaryCall, maxBytes: number, onMessage: (message: Buffer, call: UnaryCall) => void): void {
  if (body.length < 5) {
    call.fail(status.UNIMPLEMENTED, 'Received no request message for unary method');
    return;
  }
  const length = body.readUInt32BE(1);
  if (length > maxBytes) {
    call.fail(status.RESOURCE_EXHAUSTED, `Received message larger than max (${length} vs ${maxBytes})`);
    return;
  }
  if (body.length < 5 + length) {
    // The stream ended inside the message: grpc-js never sees a message, and says so.
    call.fail(status.UNIMPLEMENTED, 'Received no request message for unary method');
    return;
  }
  if (body.length > 5 + length) {
    call.fail(status.UNIMPLEMENTED, 'Received a second request message for unary method');
    return;
  }
  const message = body.subarray(5);
  const encoding = call.headers['grpc-encoding'];
  // The compressed flag with no encoding, or identity: the bytes as they are (grpc-js's identity handler).
  if (body[0] === 0 || encoding === undefined || encoding === 'identity') {
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
