/** The RLQS stream as a hostile client sees it: bare HTTP/2 connections from a chosen loopback address (the
 * address is the Envoy instance, docs/rlqs.md), gRPC frames written by hand, answers decoded as they arrive, and
 * the judge of an answer's actions against the fuzz config (rlqs-fuzz.test.ts). */
import http2 from 'node:http2';
import net from 'node:net';
import { encodeReport, Response } from '../helpers/envoy-rlqs.js';

const PATH = '/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas';

/** A gRPC message frame: flag, a 4-byte length (the real one unless `declared`), the bytes. */
export function frame(body: Buffer, flag = 0, declared = body.length): Buffer {
  const head = Buffer.alloc(5);
  head[0] = flag;
  head.writeUInt32BE(declared >>> 0, 1);
  return Buffer.concat([head, body]);
}

/** One report's usage of a bucket whose values are text (UTF-8) or bytes. */
export const usage = (bucket: Record<string, string | Buffer>, allowed = 1, denied = 0): Record<string, unknown> => ({
  bucket_id: { bucket },
  time_elapsed: { seconds: 0 },
  num_requests_allowed: allowed,
  num_requests_denied: denied,
});

export const report = (domain: string, usages: Record<string, unknown>[]): Buffer => encodeReport(domain, usages);

/** One HTTP/2 connection from `address`. */
export class RlqsConnection {
  readonly session: http2.ClientHttp2Session;
  readonly streams: RlqsStream[] = [];
  private socket: net.Socket | undefined;

  constructor(port: number, address: string) {
    this.session = http2.connect(`http://127.0.0.1:${port}`, {
      createConnection: () => {
        this.socket = net.connect({ host: '127.0.0.1', port, localAddress: address });
        return this.socket;
      },
      // Room for the 4 MiB frames some cases send beside others (Node's default would refuse new streams).
      maxSessionMemory: 256,
    });
    this.session.on('error', () => undefined); // a reset connection fails its streams, which record it
    // The port's bounds (server/port-bounds.ts): a connection closed as it opened (its address past its pace or its
    // count), or ended with ENHANCE_YOUR_CALM for its refusals, leaves its streams without a status, rightly.
    let settled = false;
    this.session.once('remoteSettings', () => (settled = true));
    this.session.once('close', () => {
      if (!settled) this.endedByBound = true;
    });
    this.session.on('goaway', (code: number) => {
      if (code === http2.constants.NGHTTP2_ENHANCE_YOUR_CALM) this.endedByBound = true;
    });
  }

  /** Closed as it opened, or ended for its refusals, by a bound of the port. */
  endedByBound = false;

  open(headers: Record<string, string> = {}): RlqsStream {
    const s = new RlqsStream(this.session.request({ ':method': 'POST', ':path': PATH, 'content-type': 'application/grpc', te: 'trailers', ...headers }));
    this.streams.push(s);
    return s;
  }

  /** The connection cut under the server: a TCP RST, no GOAWAY. */
  reset(): void {
    if (this.socket && !this.socket.destroyed) this.socket.resetAndDestroy();
    this.session.destroy();
  }

  close(): void {
    this.session.destroy();
  }
}

/** A decoded answer: bucket actions with their ids' values as Buffers. */
// biome-ignore lint/suspicious/noExplicitAny: a decoded RateLimitQuotaResponse, walked field by field
export type Answer = { bucket_action?: any[] };

export class RlqsStream {
  readonly answers: Answer[] = [];
  /** Answer messages received (all of them, decoded or not). */
  messages = 0;
  /** grpc-status, once the stream ended with one. */
  status: number | undefined;
  statusMessage = '';
  /** The stream closed without a status: reset (RST_STREAM code) or its connection gone. */
  closedWithout: string | undefined;
  /** Decode only every nth answer (a flood's answers are many and alike). */
  decodeEvery = 1;
  private buf: Buffer = Buffer.alloc(0);
  private readonly closed: Promise<void>;

  constructor(readonly h2: http2.ClientHttp2Stream) {
    h2.on('error', () => undefined);
    h2.on('data', (d: Buffer) => this.data(d));
    const ended = (h: http2.IncomingHttpHeaders): void => {
      if (h['grpc-status'] === undefined) return;
      this.status = Number(h['grpc-status']);
      this.statusMessage = safeDecode(String(h['grpc-message'] ?? ''));
    };
    h2.on('response', ended);
    h2.on('trailers', ended);
    this.closed = new Promise((resolve) =>
      h2.on('close', () => {
        if (this.status === undefined) this.closedWithout = `closed without a status (RST_STREAM ${h2.rstCode})`;
        resolve();
      }),
    );
  }

  get ended(): boolean {
    return this.status !== undefined || this.closedWithout !== undefined;
  }

  /** Writes bytes as they are (a frame or anything else); false once the stream cannot take them. */
  write(bytes: Buffer): boolean {
    if (this.h2.closed || this.h2.destroyed) return false;
    this.h2.write(bytes);
    return true;
  }

  /** Waits for the write buffer to empty, the stream to close, or `ms` to pass: a flood is paced by the server. */
  async drained(ms: number): Promise<void> {
    if (this.h2.writableLength === 0 || this.h2.destroyed) return;
    await new Promise<void>((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.h2.off('drain', done);
        this.h2.off('close', done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.h2.on('drain', done);
      this.h2.on('close', done);
    });
  }

  end(): void {
    if (!this.h2.closed) this.h2.end();
  }

  cancel(): void {
    if (!this.h2.closed) this.h2.close(http2.constants.NGHTTP2_CANCEL);
  }

  /** Resolves when the stream has closed, or after `ms`; whether it closed. */
  async whenClosed(ms: number): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<boolean>((r) => (timer = setTimeout(() => r(false), ms)));
    const done = await Promise.race([this.closed.then(() => true), late]);
    clearTimeout(timer);
    return done;
  }

  /** Resolves once `n` answers arrived, the stream ended, or `ms` passed. */
  async whenAnswered(n: number, ms: number): Promise<void> {
    const until = Date.now() + ms;
    while (this.messages < n && !this.ended && Date.now() < until) await new Promise((r) => setTimeout(r, 10));
  }

  private data(d: Buffer): void {
    this.buf = this.buf.length === 0 ? d : Buffer.concat([this.buf, d]);
    while (this.buf.length >= 5 && this.buf.length >= 5 + this.buf.readUInt32BE(1)) {
      const len = this.buf.readUInt32BE(1);
      if (this.messages++ % this.decodeEvery === 0) {
        const body = this.buf.subarray(5, 5 + len);
        this.answers.push(Response.toObject(Response.decode(body), { longs: Number, defaults: false, oneofs: true }) as Answer);
      }
      this.buf = this.buf.subarray(5 + len);
    }
  }
}

function safeDecode(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

/** One string per BucketId whatever the order of its pairs, telling apart values that differ in any byte. */
export function idKey(bucket: Record<string, string | Buffer | Uint8Array>): string {
  return JSON.stringify(
    Object.keys(bucket)
      .sort()
      .map((k) => [k, Buffer.from(bucket[k] as Uint8Array | string).toString('latin1')]),
  );
}
