/** A hostile xDS management server: every connection Tollgate makes lands on a switchboard (a TCP listener),
 * which hands it, by the round's policy, to a real HTTP/2 server speaking ADS (plaintext or TLS), to a TLS
 * server with the wrong CA, the wrong name or a demand for a client certificate, or to raw sockets that write
 * garbage, trickle, hang, close or reset. On the ADS server each stream gets a behaviour (xds-behaviours.ts).
 * Requests are decoded with Envoy's own discovery.proto (the one @grpc/grpc-js-xds ships), and judged by the
 * ledger. Nothing here is Tollgate's code. */

import http2 from 'node:http2';
import { createRequire } from 'node:module';
import net from 'node:net';
import { dirname, join } from 'node:path';
import * as protoLoader from '@grpc/proto-loader';
import type { Rng } from './fuzz-lib.js';
import { AdsStreamRecord, type DiscoveryRequest, type Expect, type Ledger } from './xds-ledger.js';

const require = createRequire(import.meta.url);
const XDS_DEPS = join(dirname(require.resolve('@grpc/grpc-js-xds/package.json')), 'deps');
export const ADS_PATH = '/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources';

const methods = protoLoader.loadSync('envoy/service/discovery/v3/ads.proto', {
  keepCase: true,
  longs: Number,
  enums: String,
  defaults: true,
  oneofs: true,
  includeDirs: [join(XDS_DEPS, 'envoy-api'), join(XDS_DEPS, 'xds'), join(XDS_DEPS, 'googleapis'), join(XDS_DEPS, 'protoc-gen-validate')],
})['envoy.service.discovery.v3.AggregatedDiscoveryService'] as protoLoader.ServiceDefinition;
const ads = methods.StreamAggregatedResources!;

export interface DiscoveryResponse {
  version_info: string;
  resources: { type_url: string; value: Uint8Array }[];
  type_url: string;
  nonce: string;
}

export const encodeResponse = (r: DiscoveryResponse): Buffer => ads.responseSerialize(r);
export const decodeResponse = (b: Buffer): DiscoveryResponse => ads.responseDeserialize(b) as DiscoveryResponse;

/** How a connection is served. TLS ones need the servers made with `tls` certificates. */
export type Transport = 'h2' | 'tls' | 'tls-wrong-ca' | 'tls-wrong-name' | 'tls-client-cert' | 'garbage' | 'trickle' | 'hang' | 'close' | 'reset';

/** One ADS stream as a behaviour drives it. */
export class AdsStream {
  readonly record = new AdsStreamRecord();
  /** Called after each request Tollgate sends on the stream (the ledger has judged it). */
  onRequest: ((req: DiscoveryRequest) => void) | undefined;
  private headersSent = false;
  private trailers: Record<string, string> = { 'grpc-status': '0' };

  constructor(
    readonly h2: http2.ServerHttp2Stream,
    private readonly ledger: Ledger,
  ) {
    h2.on('error', () => undefined);
    h2.on('wantTrailers', () => h2.sendTrailers(this.trailers));
  }

  get open(): boolean {
    return !this.h2.closed && !this.h2.destroyed;
  }

  /** The response headers, once (a gRPC answer's). */
  head(headers: Record<string, string> = { ':status': '200', 'content-type': 'application/grpc' }): void {
    if (this.headersSent || !this.open) return;
    this.headersSent = true;
    this.h2.respond(headers, { waitForTrailers: true });
  }

  /** A response, recorded in the ledger as what it expects, written whole or as `bytes` of it at a time. */
  send(r: DiscoveryResponse, expect: Expect): Buffer | undefined {
    if (!this.open) return undefined;
    this.ledger.sent(this.record, r.nonce, r.version_info, expect);
    const body = encodeResponse(r);
    const frame = Buffer.concat([frameHeader(body.length), body]);
    this.write(frame);
    return frame;
  }

  write(bytes: Buffer): void {
    this.head();
    if (this.open) this.h2.write(bytes);
  }

  /** Ends the stream with a status (and a message, sent as it is). */
  end(status: number, message?: string): void {
    if (!this.open) return;
    this.trailers = { 'grpc-status': String(status), ...(message !== undefined && { 'grpc-message': encodeURIComponent(message) }) };
    this.head();
    this.h2.end();
  }
}

export function frameHeader(length: number, flag = 0): Buffer {
  const h = Buffer.alloc(5);
  h[0] = flag;
  h.writeUInt32BE(length >>> 0, 1);
  return h;
}

/** Splits gRPC frames out of a stream's data and decodes each as a DiscoveryRequest. */
export function readRequests(h2: http2.ServerHttp2Stream, each: (req: DiscoveryRequest) => void): void {
  let buf: Buffer = Buffer.alloc(0);
  h2.on('data', (d: Buffer) => {
    buf = buf.length === 0 ? d : Buffer.concat([buf, d]);
    while (buf.length >= 5 && buf.length >= 5 + buf.readUInt32BE(1)) {
      const len = buf.readUInt32BE(1);
      each(ads.requestDeserialize(buf.subarray(5, 5 + len)) as DiscoveryRequest);
      buf = buf.subarray(5 + len);
    }
  });
}

export interface TlsFiles {
  /** Key and certificate Tollgate accepts (its CA, the name it checks). */
  good: { key: Buffer; cert: Buffer };
  /** The same name, signed by another CA. */
  wrongCa: { key: Buffer; cert: Buffer };
  /** Tollgate's CA, another name. */
  wrongName: { key: Buffer; cert: Buffer };
  ca: Buffer;
}

export class Switchboard {
  port = 0;
  /** How the next connection is served. */
  policy: (r: Rng) => Transport = () => 'h2';
  private readonly listener = net.createServer((s) => this.accept(s));
  private readonly servers: Partial<Record<Transport, net.Server>> = {};
  private readonly sockets = new Set<net.Socket>();
  private readonly sessions = new Set<http2.ServerHttp2Session>();

  constructor(
    private readonly r: Rng,
    onStream: (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders) => void,
    tls?: TlsFiles,
  ) {
    const track = (server: http2.Http2Server | http2.Http2SecureServer): void => {
      server.on('session', (s: http2.ServerHttp2Session) => {
        this.sessions.add(s);
        s.on('close', () => this.sessions.delete(s));
        s.on('error', () => undefined);
      });
      server.on('stream', onStream);
      server.on('error', () => undefined);
      server.on('tlsClientError', () => undefined);
    };
    const h2 = http2.createServer({ maxSessionMemory: 1024 });
    track(h2);
    this.servers.h2 = h2;
    if (tls) {
      const secure = (files: { key: Buffer; cert: Buffer }, extra: object = {}): http2.Http2SecureServer => {
        const s = http2.createSecureServer({ ...files, maxSessionMemory: 1024, ...extra });
        track(s);
        return s;
      };
      this.servers.tls = secure(tls.good);
      this.servers['tls-wrong-ca'] = secure(tls.wrongCa);
      this.servers['tls-wrong-name'] = secure(tls.wrongName);
      this.servers['tls-client-cert'] = secure(tls.good, { requestCert: true, rejectUnauthorized: true, ca: tls.ca });
    }
  }

  async start(): Promise<number> {
    await new Promise<void>((resolve) => this.listener.listen(0, '127.0.0.1', resolve));
    this.port = (this.listener.address() as net.AddressInfo).port;
    return this.port;
  }

  private accept(socket: net.Socket): void {
    this.sockets.add(socket);
    socket.on('close', () => this.sockets.delete(socket));
    socket.on('error', () => undefined);
    const how = this.policy(this.r);
    const server = this.servers[how];
    if (server) return void server.emit('connection', socket);
    if (how === 'close') socket.end();
    else if (how === 'reset') socket.resetAndDestroy();
    else if (how === 'garbage') socket.write(Buffer.from(this.r.bytes(this.r.between(1, 4096))));
    else if (how === 'trickle') this.trickle(socket);
    // 'hang': accepted, never a byte; cut at the end of the round.
  }

  private trickle(socket: net.Socket): void {
    const bytes = Buffer.from(this.r.bytes(200));
    let at = 0;
    const timer = setInterval(() => {
      if (at >= bytes.length || socket.destroyed) return clearInterval(timer);
      socket.write(bytes.subarray(at, ++at));
    }, 25);
    socket.on('close', () => clearInterval(timer));
  }

  /** Cuts every connection: Tollgate reconnects, to whatever the policy says then. */
  cutAll(): void {
    for (const s of this.sessions) s.destroy();
    for (const s of this.sockets) s.destroy();
  }

  async stop(): Promise<void> {
    this.cutAll();
    await new Promise((resolve) => this.listener.close(resolve));
  }
}
