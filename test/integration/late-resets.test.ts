import http2 from 'node:http2';
import { afterEach, describe, expect, it } from 'vitest';
import { encodeRequest, frame } from '../adversarial/grpc-cases.js';
import { streamStatus } from '../helpers/grpc-frames.js';
import { metric, scrape } from '../helpers/metrics.js';
import { type Daemon, freePort, loopback, startCli } from '../helpers/process.js';
import { sleep, within } from '../helpers/time.js';

// Envoy resets every rate-limit call at its filter timeout (grpc-timeout on the call). When Tollgate stalls (a
// GC pause, a CPU throttle) past that timeout, Envoy's resets of the calls it sent meanwhile arrive all at once:
// they are late resets, never counted against the connection (src/server/reset-guard.ts), so Envoy keeps its
// connection and the calls after the stall are answered. Rapid reset (a stream reset before its client could
// have given up) still ends the connection past a burst of 200, as round 5 left it.

const PATH = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';
const BODY = frame(Buffer.from(encodeRequest({ domain: 'property-api', descriptors: [{ entries: [{ key: 'category', value: 'read' }] }] })));
const GRPC = { ':method': 'POST', 'content-type': 'application/grpc', te: 'trailers' };

let daemon: Daemon | undefined;
afterEach(async () => {
  daemon?.child.kill('SIGCONT');
  daemon?.child.kill('SIGKILL');
  await daemon?.exited;
  daemon = undefined;
});

async function serve(server: string): Promise<{ grpc: number; http: number }> {
  const [grpc, http] = [await freePort(), await freePort()];
  daemon = await startCli(['serve', ...loopback(grpc, http), '--grpc-server', server], /tollgate serving/);
  return { grpc, http };
}

function connect(port: number): Promise<http2.ClientHttp2Session> {
  const s = http2.connect(`http://127.0.0.1:${port}`);
  s.on('error', () => undefined);
  return new Promise((resolve) => s.once('remoteSettings', () => resolve(s)));
}

/** One call as Envoy makes it: grpc-timeout named, reset (CANCEL) at that deadline when unanswered. */
function envoyCall(s: http2.ClientHttp2Session, timeoutMs: number): Promise<string> {
  const req = s.request({ ...GRPC, ':path': PATH, 'grpc-timeout': `${timeoutMs}m` });
  req.end(BODY);
  const timer = setTimeout(() => req.close(http2.constants.NGHTTP2_CANCEL), timeoutMs);
  return streamStatus(req).finally(() => clearTimeout(timer));
}

/** Why the replica says it ended connections (its metric, by reason). */
async function refusedFor(http: number): Promise<string> {
  const m = await scrape(http);
  const reasons = ['protocol', 'resets', 'refusals'];
  return reasons.map((reason) => `${reason} ${metric(m.series, 'tollgate_grpc_connections_refused_total', { reason }) ?? 0}`).join(', ');
}

// Node 20 ignores streamResetBurst (its nghttp2 keeps 1,000): engines names 22 and 24 only.
const node20 = Number(process.versions.node.split('.')[0]) < 22;

describe.each(['http2', 'grpc-js'])('GRPC_SERVER=%s', (server) => {
  // 2,000 ms: a backlog read over several turns, whose later turns once read Envoy's late resets as rapid (1 run of
  // 4 on Node 22 with grpc-js; reset-guard.ts now carries the stall through the backlog).
  // 1,000 ms: the margin a busy machine needs, where the 500 ms stall's calls arrive as from a longer one. Node
  // refuses the streams read before it lets go of the stall's closed ones, and ended the connection past 2,000
  // refused in a row (port-bounds.ts MAX_REJECTED_STREAMS): 3 of 3 runs lost it at a 1,100 ms stall.
  it.skipIf(node20).each([500, 1000, 2000])(
    'a %i ms stall at 4,000 calls a second: Envoy keeps its connection',
    async (stallMs) => {
      const port = await serve(server);
      const s = await connect(port.grpc);
      let goaway = false;
      s.on('goaway', () => (goaway = true));
      expect(await envoyCall(s, 1000)).toBe('0');
      // As Envoy sends them: 8 calls every 2 ms, each reset at its 50 ms deadline; 500 ms, stopped, 500 ms more.
      const calls: Promise<string>[] = [];
      const t0 = Date.now();
      let stopped = false;
      let resumed = false;
      while (Date.now() - t0 < stallMs + 1000) {
        if (!stopped && Date.now() - t0 >= 500) {
          stopped = true;
          daemon!.child.kill('SIGSTOP');
        }
        if (!resumed && Date.now() - t0 >= 500 + stallMs) {
          resumed = true;
          daemon!.child.kill('SIGCONT');
        }
        if (s.destroyed) throw new Error(`connection lost at ${Date.now() - t0} ms: ${await refusedFor(port.http)}`);
        for (let i = 0; i < 8; i++) calls.push(envoyCall(s, 50));
        await sleep(2);
      }
      const results = await Promise.all(calls);
      const timedOut = `rst ${http2.constants.NGHTTP2_CANCEL}`;
      // Each call answered, reset at its own deadline, or refused by Node's count of streams this process has not
      // yet closed (ENHANCE_YOUR_CALM: calls read in the same turn as the stall's resets, or, on a busy machine,
      // calls faster than it serves them; docs/security.md): none lost with the connection, which is kept.
      const refused = `rst ${http2.constants.NGHTTP2_ENHANCE_YOUR_CALM}`;
      expect(results.filter((r) => r !== '0' && r !== timedOut && r !== refused)).toEqual([]);
      expect(results.filter((r) => r === timedOut).length).toBeGreaterThan(200);
      expect(goaway).toBe(false);
      // The calls after the stall, on the same connection: answered, 50 in a row. Not all at once the moment the
      // stall's calls are done: Node keeps a stream the client reset after it was answered in its count of open
      // streams until the answer's write completes, so a burst sent then may still meet ENHANCE_YOUR_CALM
      // (docs/security.md; 15 of 50 once on Node 22 with grpc-js).
      let inRow = 0;
      await within(
        10_000,
        async () => {
          inRow = (await envoyCall(s, 5000)) === '0' ? inRow + 1 : 0;
          return inRow >= 50;
        },
        '50 calls in a row answered after the stall',
      );
      const m = await scrape(port.http);
      expect(metric(m.series, 'tollgate_grpc_connections_refused_total', { reason: 'resets' }) ?? 0).toBe(0);
      s.close();
    },
    30_000,
  );

  it.each([
    ['no deadline', undefined],
    ['a deadline of 1 ms', '1m'],
  ])(
    'rapid reset with %s still ends the connection past 200 resets',
    async (_name, named) => {
      const port = await serve(server);
      const s = await connect(port.grpc);
      const ended = new Promise<number>((resolve) => s.once('goaway', (code) => resolve(code)));
      let sent = 0;
      // Up to 2,000: a stream its client resets after it was answered is not counted, nor, on a machine so busy
      // that this process waits 25 ms for a core between two reads, the streams of the read after.
      for (; sent < 2000 && !s.closed && !s.destroyed; sent++) {
        const req = s.request({ ...GRPC, ':path': PATH, ...(named ? { 'grpc-timeout': named } : {}) });
        req.on('error', () => undefined);
        // HEADERS, then RST_STREAM at once.
        req.close(http2.constants.NGHTTP2_CANCEL);
        if (sent % 50 === 49) await sleep(1);
      }
      expect(await Promise.race([ended, sleep(5000).then(() => 'no goaway')])).toBe(http2.constants.NGHTTP2_ENHANCE_YOUR_CALM);
      s.destroy();
      const m = await scrape(port.http);
      expect(metric(m.series, 'tollgate_grpc_connections_refused_total', { reason: 'resets' })).toBe(1);
    },
    30_000,
  );
});
