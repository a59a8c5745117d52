import { execFile } from 'node:child_process';
import http2 from 'node:http2';
import { gzipSync } from 'node:zlib';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ByteBudget } from '../../src/server/byte-budget.js';
import { serveUnary } from '../../src/server/h2-unary.js';
import { encodeRequest, frame } from '../adversarial/grpc-cases.js';
import { streamStatus } from '../helpers/grpc-frames.js';
import { healthClient, RlsClient, type RlsRequest, startTestService, type TestService } from '../helpers/service.js';

// ShouldRateLimit on node:http2 (src/server/hot-path.ts, h2-unary.ts, h2-rls.ts) against real clients: grpc-js,
// a C-core client (python3-grpcio), h2load and raw HTTP/2 streams; each case on the default server and on
// GRPC_SERVER=grpc-js, which serves every method through grpc-js. What differs between the two is said.

const PATH = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';
const REQUEST: RlsRequest = {
  domain: 'property-api',
  descriptors: [
    {
      entries: [
        { key: 'category', value: 'read' },
        { key: 'token', value: 'tok-1' },
      ],
    },
  ],
  hits_addend: 1,
};
const BODY = Buffer.from(encodeRequest(REQUEST));

interface Answer {
  status?: number;
  acceptEncoding?: string;
  grpcStatus?: string;
  message?: string;
  data: Buffer;
}

/** One raw HTTP/2 request: its headers, its body as sent; the answer's :status, grpc-status and -message (from
 * the headers of a trailers-only answer or from the trailers) and its data. */
function raw(port: number, body: Buffer, headers: Record<string, string> = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`http://127.0.0.1:${port}`);
    session.on('error', reject);
    const req = session.request({ ':method': 'POST', ':path': PATH, 'content-type': 'application/grpc', te: 'trailers', ...headers });
    const out: Answer = { data: Buffer.alloc(0) };
    const read = (h: http2.IncomingHttpHeaders): void => {
      if (h[':status'] !== undefined) out.status = Number(h[':status']);
      if (h['grpc-accept-encoding'] !== undefined) out.acceptEncoding = String(h['grpc-accept-encoding']);
      if (h['grpc-status'] !== undefined) out.grpcStatus = String(h['grpc-status']);
      if (h['grpc-message'] !== undefined) out.message = decodeURI(String(h['grpc-message']));
    };
    req.on('response', read);
    req.on('trailers', read);
    req.on('data', (d: Buffer) => {
      out.data = Buffer.concat([out.data, d]);
    });
    req.on('error', () => undefined);
    req.on('close', () => {
      session.close();
      resolve(out);
    });
    req.end(body);
  });
}

const servers = ['http2', 'grpc-js'] as const;
const running: Record<string, TestService> = {};
beforeAll(async () => {
  for (const s of servers) running[s] = await startTestService({ args: ['--grpc-server', s] });
});
afterAll(async () => {
  for (const t of Object.values(running)) await t.close();
});

describe.each(servers)('GRPC_SERVER=%s', (server) => {
  const port = (): number => running[server]!.service.grpcPort;

  it('answers ShouldRateLimit, and every other method (health, an unknown one) on the same port', async () => {
    const res = await running[server]!.rls.call(REQUEST);
    expect(res.overall_code).toBe('OK');
    const health = healthClient(port());
    const checked = await new Promise<unknown>((resolve, reject) =>
      health.Check({ service: '' }, (err: Error | null, r: unknown) => (err ? reject(err) : resolve(r))),
    );
    expect(checked).toMatchObject({ status: 1 }); // SERVING
    health.close();
    const unknown = await raw(port(), frame(BODY), { ':path': '/envoy.service.ratelimit.v3.RateLimitService/Nope' });
    expect(unknown.grpcStatus).toBe(String(grpc.status.UNIMPLEMENTED));
  });

  it('reads requests compressed with gzip and deflate, and says which encodings it accepts', async () => {
    for (const algorithm of [1, 2]) {
      const client = new RlsClient(port(), { 'grpc.default_compression_algorithm': algorithm, 'grpc.min_message_size_to_compress': 1 } as grpc.ChannelOptions);
      expect((await client.call(REQUEST)).overall_code).toBe('OK');
      client.close();
    }
    const gz = await raw(port(), frame(gzipSync(BODY), 1), { 'grpc-encoding': 'gzip' });
    expect(gz.grpcStatus).toBe('0');
    expect(gz.acceptEncoding?.split(',').sort()).toEqual(['deflate', 'gzip', 'identity']);
    expect(gz.data.length).toBeGreaterThan(5);
  });

  it('refuses what is not one well-formed message: none, two, truncated, another content type', async () => {
    expect((await raw(port(), Buffer.alloc(0))).grpcStatus).toBe(String(grpc.status.UNIMPLEMENTED));
    expect((await raw(port(), Buffer.concat([frame(BODY), frame(BODY)]))).grpcStatus).toBe(String(grpc.status.UNIMPLEMENTED));
    const truncated = await raw(port(), frame(BODY, 0, BODY.length + 10));
    expect(truncated.grpcStatus).not.toBe('0');
    expect((await raw(port(), frame(BODY), { 'content-type': 'text/plain' })).status).toBe(415);
  });

  it('refuses a message over 4 MiB, sent as it is or as a small gzip that inflates past it, with RESOURCE_EXHAUSTED', async () => {
    const big = await raw(port(), frame(Buffer.alloc(5 * 1024 * 1024, 1)));
    expect(big.grpcStatus).toBe(String(grpc.status.RESOURCE_EXHAUSTED));
    const bomb = gzipSync(Buffer.alloc(10 * 1024 * 1024));
    expect(bomb.length).toBeLessThan(64 * 1024);
    const inflated = await raw(port(), frame(bomb, 1), { 'grpc-encoding': 'gzip' });
    expect(inflated.grpcStatus).toBe(String(grpc.status.RESOURCE_EXHAUSTED));
  });

  // Debian's python3 (python3-grpcio is installed for it), whatever python3 comes first on PATH.
  it('answers a C-core client (python3-grpcio) as it answers grpc-js', async () => {
    const script = [
      'import grpc, sys',
      `channel = grpc.insecure_channel("127.0.0.1:${port()}")`,
      `call = channel.unary_unary("${PATH}")`,
      'print(call(bytes.fromhex(sys.argv[1]), timeout=5).hex())',
    ].join('\n');
    const out = await new Promise<string>((resolve, reject) =>
      execFile('/usr/bin/python3', ['-c', script, BODY.toString('hex')], { timeout: 20_000 }, (err, stdout, stderr) =>
        err ? reject(new Error(stderr)) : resolve(stdout),
      ),
    );
    // overall_code OK (field 1, varint 1) leads the RateLimitResponse.
    expect(out.trim().slice(0, 4)).toBe('0801');
  });
});

describe('GRPC_SERVER=http2 only', () => {
  it('takes ShouldRateLimit from grpc-js: a bad grpc-timeout or encoding is answered without echoing it, on grpc-js too', async () => {
    // grpc-js 1.14 echoes both in its grpc-message; the port's screen (stream-screen.ts) answers them first.
    const secret = 'secret-value';
    for (const port of [running.http2!.service.grpcPort, running['grpc-js']!.service.grpcPort]) {
      const timeout = await raw(port, frame(BODY), { 'grpc-timeout': secret });
      expect(timeout.grpcStatus).toBe(String(grpc.status.INTERNAL));
      expect(timeout.message).toBe(`Invalid grpc-timeout value (${secret.length} characters)`);
      const encoding = await raw(port, frame(BODY, 1), { 'grpc-encoding': secret });
      expect(encoding.grpcStatus).toBe(String(grpc.status.UNIMPLEMENTED));
      expect(encoding.message).not.toContain(secret);
    }
  });

  it('ends a call its handler has not answered by its grpc-timeout with DEADLINE_EXCEEDED, and drops the late answer', async () => {
    let late: (() => void) | undefined;
    const server = http2.createServer();
    server.on('stream', (stream, headers) =>
      serveUnary(stream, headers, { maxBytes: 1024, budget: new ByteBudget(1 << 20, 1 << 20), defaultDeadlineMs: 10_000 }, (_m, call) => {
        late = () => call.reply(Buffer.from([0, 0, 0, 0, 2, 8, 1]));
      }),
    );
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as { port: number }).port;
    const start = Date.now();
    const answer = await raw(port, frame(BODY), { 'grpc-timeout': '80m' });
    expect(answer.grpcStatus).toBe(String(grpc.status.DEADLINE_EXCEEDED));
    expect(Date.now() - start).toBeGreaterThanOrEqual(70);
    expect(answer.data.length).toBe(0);
    late!(); // after the deadline: dropped, and nothing throws
    server.close();
  });

  it('reads a message sent a byte a DATA frame, and ends a body that never ends at its grpc-timeout', async () => {
    const port = running.http2!.service.grpcPort;
    const session = http2.connect(`http://127.0.0.1:${port}`);
    const ask = (headers: Record<string, string>) =>
      session.request({ ':method': 'POST', ':path': PATH, 'content-type': 'application/grpc', te: 'trailers', ...headers });
    const trickled = ask({});
    const status = streamStatus;
    const trickledStatus = status(trickled);
    for (const byte of frame(BODY)) trickled.write(Buffer.from([byte]));
    trickled.end();
    expect(await trickledStatus).toBe('0');
    // Half a message, then nothing: DEADLINE_EXCEEDED at 100 ms, not whenever the connection closes.
    const stalled = ask({ 'grpc-timeout': '100m' });
    const stalledStatus = status(stalled);
    stalled.write(frame(BODY).subarray(0, 8));
    const start = Date.now();
    expect(await stalledStatus).toBe(String(grpc.status.DEADLINE_EXCEEDED));
    expect(Date.now() - start).toBeLessThan(5000);
    stalled.close();
    session.close();
  });

  it('serves h2load: every request of a fixed run answered with :status 200', async () => {
    const { writeFileSync, mkdtempSync } = await import('node:fs');
    const dir = mkdtempSync('/tmp/h2load-');
    writeFileSync(`${dir}/body`, frame(BODY));
    const port = running.http2!.service.grpcPort;
    const out = await new Promise<string>((resolve, reject) =>
      execFile(
        'h2load',
        [
          '-n',
          '2000',
          '-c',
          '4',
          '-m',
          '8',
          '-d',
          `${dir}/body`,
          '-H',
          'content-type: application/grpc',
          '-H',
          'te: trailers',
          `http://127.0.0.1:${port}${PATH}`,
        ],
        { timeout: 30_000 },
        (err, stdout) => (err ? reject(err) : resolve(stdout)),
      ),
    );
    expect(out).toMatch(/requests: 2000 total, 2000 started, 2000 done, 2000 succeeded/);
    expect(out).toMatch(/status codes: 2000 2xx/);
  });
});
