import http2 from 'node:http2';
import { gzipSync } from 'node:zlib';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ByteBudget } from '../../src/server/byte-budget.js';
import { serveUnary } from '../../src/server/h2-unary.js';
import { encodeRequest, frame } from '../adversarial/grpc-cases.js';
import { streamStatus } from '../helpers/grpc-frames.js';
import { metric, scrape } from '../helpers/metrics.js';
import { startTestService, type TestService } from '../helpers/service.js';
import { within } from '../helpers/time.js';

// The gRPC port's bounds (src/server/port-bounds.ts, hot-path.ts), on both servers: what a client sees at each.

const PATH = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';
const HEALTH = '/grpc.health.v1.Health/Check';
const BODY = Buffer.from(encodeRequest({ domain: 'property-api', descriptors: [{ entries: [{ key: 'category', value: 'read' }] }] }));
const GRPC = { ':method': 'POST', 'content-type': 'application/grpc', te: 'trailers' };

const status = streamStatus;

function connect(port: number): Promise<http2.ClientHttp2Session> {
  const s = http2.connect(`http://127.0.0.1:${port}`);
  s.on('error', () => undefined);
  return new Promise((resolve) => s.once('remoteSettings', () => resolve(s)));
}

describe.each(['http2', 'grpc-js'])('GRPC_SERVER=%s', (server) => {
  let t: TestService;
  beforeAll(async () => {
    t = await startTestService({ args: ['--grpc-server', server] });
  });
  afterAll(async () => t?.close());

  it('advertises 100 streams and 16 KiB of headers; a stream past the header bound is reset, the connection serves on', async () => {
    const s = await connect(t.service.grpcPort);
    expect(s.remoteSettings).toMatchObject({ maxConcurrentStreams: 100, maxHeaderListSize: 16_384 });
    const big = s.request({ ...GRPC, ':path': PATH, 'x-big': 'h'.repeat(20_000) });
    big.end(frame(BODY));
    expect(await status(big)).toBe(`rst ${http2.constants.NGHTTP2_ENHANCE_YOUR_CALM}`);
    const next = s.request({ ...GRPC, ':path': PATH });
    next.end(frame(BODY));
    expect(await status(next)).toBe('0');
    s.close();
  });

  it('what grpc-js inflates is bounded as the hot path is: a bomb to health stops at 256 KiB, nothing held after', async () => {
    const s = await connect(t.service.grpcPort);
    const bomb = s.request({ ...GRPC, ':path': HEALTH, 'grpc-encoding': 'gzip' });
    bomb.end(frame(gzipSync(Buffer.alloc(3 * 1024 * 1024)), 1));
    const answer = await new Promise<string>((resolve) => {
      const read = (h: http2.IncomingHttpHeaders): void => {
        if (h['grpc-status'] !== undefined) resolve(`${h['grpc-status']} ${decodeURI(String(h['grpc-message']))}`);
      };
      bomb.on('response', read);
      bomb.on('trailers', read);
      bomb.on('data', () => undefined);
    });
    // grpc-js alone inflated it whole, to its 4 MiB receive limit.
    expect(answer).toBe(`${grpc.status.RESOURCE_EXHAUSTED} Received message that decompresses to a size larger than 262144`);
    const small = s.request({ ...GRPC, ':path': HEALTH, 'grpc-encoding': 'gzip' });
    small.end(frame(gzipSync(Buffer.alloc(0)), 1));
    expect(await status(small)).toBe('0');
    await within(2000, async () => metric((await scrape(t.service.httpPort)).series, 'tollgate_grpc_request_bytes_held') === 0, 'nothing held');
    s.close();
  });

  it('a connection whose calls are refused 64 times is ended with GOAWAY, and its address waits before the next', async () => {
    const port = t.service.grpcPort;
    const before = (await scrape(t.service.httpPort)).series;
    const s = await connect(port);
    const goaway = new Promise<number>((resolve) => s.once('goaway', resolve));
    // A declared length past the receive limit: RESOURCE_EXHAUSTED at once, on either server.
    for (let i = 0; i < 64; i++) {
      const req = s.request({ ...GRPC, ':path': PATH });
      req.on('error', () => undefined);
      req.end(frame(BODY, 0, 5 * 1024 * 1024));
    }
    expect(await goaway).toBe(http2.constants.NGHTTP2_ENHANCE_YOUR_CALM);
    // The address is a second below its pace: a new connection is closed as it opens.
    const refused = http2.connect(`http://127.0.0.1:${port}`);
    refused.on('error', () => undefined);
    await new Promise((r) => refused.once('close', r));
    const after = (await scrape(t.service.httpPort)).series;
    const count = (m: Map<string, number>, reason: string): number => metric(m, 'tollgate_grpc_connections_refused_total', { reason }) ?? 0;
    expect(count(after, 'refusals') - count(before, 'refusals')).toBe(1);
    expect(count(after, 'pace') - count(before, 'pace')).toBeGreaterThanOrEqual(1);
    // Paced, not shut out: a connection opens again once the pace allows.
    await within(
      5000,
      async () => {
        const again = await Promise.race([connect(port), new Promise<undefined>((r) => setTimeout(() => r(undefined), 500))]);
        if (!again) return false;
        const req = again.request({ ...GRPC, ':path': HEALTH });
        req.end(frame(Buffer.alloc(0)));
        const ok = (await status(req)) === '0';
        again.close();
        return ok;
      },
      'a connection after the wait',
    );
  });
});

describe('a call on node:http2 (h2-unary.ts)', () => {
  let server: http2.Http2Server;
  let port: number;
  const budget = new ByteBudget(64 * 1024, 1 << 20);
  beforeAll(async () => {
    server = http2.createServer();
    server.on('stream', (stream, headers) =>
      serveUnary(stream, headers, { maxBytes: 256 * 1024, budget, defaultDeadlineMs: 150 }, (_m, call) => call.reply(Buffer.from([0, 0, 0, 0, 0]))),
    );
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    port = (server.address() as { port: number }).port;
  });
  afterAll(() => server.close());

  it('without grpc-timeout, and never ended, is ended at the server deadline', async () => {
    const s = await connect(port);
    const req = s.request({ ...GRPC, ':path': PATH });
    req.write(frame(BODY).subarray(0, 3));
    expect(await status(req)).toBe(String(grpc.status.DEADLINE_EXCEEDED));
    expect(budget.total).toBe(0);
    s.close();
  });

  it('holds only what arrived of a declared message, and refuses what would pass its connection share', async () => {
    const s = await connect(port);
    // 40 KiB declared and 10 sent: ~10 KiB held (a declared length allocates nothing until its bytes come).
    const a = s.request({ ...GRPC, ':path': PATH, 'grpc-timeout': '5S' });
    a.write(frame(Buffer.alloc(10 * 1024), 0, 40 * 1024));
    await within(2000, () => budget.total > 0, 'the first bytes held');
    expect(budget.total).toBeLessThanOrEqual(16 * 1024);
    // A second message of 60 KiB on the same connection passes its 64 KiB share: refused, and holds nothing.
    const b = s.request({ ...GRPC, ':path': PATH, 'grpc-timeout': '5S' });
    b.end(frame(Buffer.alloc(60 * 1024)));
    expect(await status(b)).toBe(String(grpc.status.RESOURCE_EXHAUSTED));
    a.close();
    await within(2000, () => budget.total === 0, 'the bytes given back');
    s.close();
  });
});
