import type { Http2Server, IncomingHttpHeaders, ServerHttp2Stream } from 'node:http2';
import type * as grpc from '@grpc/grpc-js';

/** A stream of the method taken from grpc-js, and its headers. */
export type StreamHandler = (stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => void;

/** grpc-js makes the HTTP/2 server of every port it binds (Server.createHttp2Server, grpc-js 1.14): its TLS and
 * mTLS, its certificate reloads, its sessions' keepalive, connection age and idle limits, GOAWAY and in-flight
 * calls finished on shutdown. One method is taken from it on that server: its streams go to `handle`, every
 * other stream (RLQS, health, an unknown method) to grpc-js as before, on the same connection. A grpc-js whose
 * server has no such method is refused at start (GRPC_SERVER=grpc-js serves every method through grpc-js); the
 * version is pinned in package-lock.json, and test/integration/grpc-server.test.ts fails if the hook stops
 * taking the method. */
export function takeMethod(server: grpc.Server, path: string, handle: StreamHandler): void {
  const target = server as unknown as { createHttp2Server?: (credentials: unknown) => Http2Server };
  const create = target.createHttp2Server;
  if (typeof create !== 'function') throw new Error('this grpc-js has no createHttp2Server: set GRPC_SERVER=grpc-js');
  target.createHttp2Server = (credentials: unknown): Http2Server => {
    const h2 = create.call(server, credentials);
    const others = h2.listeners('stream') as ((...args: unknown[]) => void)[];
    h2.removeAllListeners('stream');
    // The event's four arguments named (Node's 'stream' event: stream, headers, flags, rawHeaders), not a rest
    // parameter: that would build an array on every call, the hot method's too.
    h2.on('stream', (stream: ServerHttp2Stream, headers: IncomingHttpHeaders, flags: number, rawHeaders: string[]) => {
      if (headers[':path'] === path) handle(stream, headers);
      else for (const l of others) l.call(h2, stream, headers, flags, rawHeaders);
    });
    return h2;
  };
}
