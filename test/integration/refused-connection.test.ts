import type { Http2Server } from 'node:http2';
import http2 from 'node:http2';
import * as grpc from '@grpc/grpc-js';
import { describe, expect, it } from 'vitest';
import { ByteBudget } from '../../src/server/byte-budget.js';
import { ConnectionGate } from '../../src/server/connection-gate.js';
import { guardPort } from '../../src/server/hot-path.js';

// A connection the gate refuses as it opens is closed before Node sets up anything for it: no HTTP/2 session
// (nor, on a TLS port, a handshake). Node's own listener once still made a session on the closed socket, ~105 µs
// of CPU a refused connection where ~29 are left (bench/reset-cost.mjs): what a client reconnecting as fast as it
// is refused costs the replica.

describe('a connection refused by the gate', () => {
  it('gets no HTTP/2 session: Node never sets one up for it', async () => {
    const server = new grpc.Server();
    let h2: Http2Server | undefined;
    const target = server as unknown as { createHttp2Server: (c: unknown) => Http2Server };
    const create = target.createHttp2Server;
    target.createHttp2Server = (c: unknown) => (h2 = create.call(server, c));
    const refusals: string[] = [];
    // One connection let in, then none: the second is refused as it opens.
    const gate = new ConnectionGate({ perAddress: 10, inAll: 10, burst: 1, perSecond: 0.001 });
    const budget = new ByteBudget(1 << 20, 1 << 22);
    guardPort(server, { gate, budget, screen: { defaultDeadlineMs: 1000, streaming: new Set() }, onRefused: (why) => refusals.push(why) });
    const port = await new Promise<number>((resolve, reject) =>
      server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
    );
    let sessions = 0;
    h2!.on('session', () => sessions++);
    const open = (): Promise<boolean> => {
      const s = http2.connect(`http://127.0.0.1:${port}`);
      s.on('error', () => undefined);
      return new Promise((resolve) => {
        s.once('remoteSettings', () => resolve(true));
        s.once('close', () => resolve(false));
      }).finally(() => s.destroy()) as Promise<boolean>;
    };
    expect(await open()).toBe(true);
    expect(await open()).toBe(false);
    expect(refusals).toEqual(['pace']);
    expect(sessions).toBe(1);
    server.forceShutdown();
  });
});
