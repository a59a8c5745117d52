import { constants, type Http2Server, type Http2Session, type IncomingHttpHeaders, type ServerHttp2Stream } from 'node:http2';
import type { Socket } from 'node:net';
import type * as grpc from '@grpc/grpc-js';
import type { ByteBudget } from './byte-budget.js';
import type { ConnectionGate, GateRefusal } from './connection-gate.js';
import { budgetSession, inflateWithinBudgets } from './grpc-js-inflate.js';
import { MAX_HEADER_LIST_BYTES, MAX_REFUSALS_PER_CONNECTION, MAX_REJECTED_STREAMS } from './port-bounds.js';
import { noteOpened, openedOn, ResetAllowance, resetLate, startResetClock } from './reset-guard.js';
import { type ScreenLimits, screenStream } from './stream-screen.js';

/** A stream of the method taken from grpc-js, and its headers. */
export type StreamHandler = (stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => void;

/** What guards the port: the connection gate, the screen of streams that go to grpc-js, and (GRPC_SERVER=http2)
 * the one method served here instead. */
export interface PortGuard {
  gate: ConnectionGate;
  /** What the calls of a connection, and of all, may hold (inflation in grpc-js too: grpc-js-inflate.ts). */
  budget: ByteBudget;
  screen: ScreenLimits;
  hot?: { path: string; handle: StreamHandler };
  /** An HTTP/2 session set up (server/peers.ts names the connections calls come on). */
  onSession?: (session: Http2Session) => void;
  /** A connection closed as it opened, ended for its refusals, or ended by Node for a protocol error or flood. */
  onRefused?: (why: GateRefusal | 'refusals' | 'resets' | 'protocol') => void;
}

/** grpc-js makes the HTTP/2 server of every port it binds (Server.createHttp2Server, grpc-js 1.14): its TLS and
 * mTLS, its certificate reloads, its sessions' keepalive, connection age and idle limits, GOAWAY and in-flight
 * calls finished on shutdown. That server is guarded here, on both servers (port-bounds.ts): connections are
 * gated as they open, the header list is bounded, a connection whose streams keep being refused is ended, and
 * every stream that goes to grpc-js is screened first (stream-screen.ts). With `hot`, one method is taken from
 * grpc-js: its streams go to `hot.handle`, every other stream (RLQS, health, an unknown method) to grpc-js as
 * before, on the same connection. A grpc-js whose server has no createHttp2Server is refused at start; the
 * version is pinned in package-lock.json, and test/integration/grpc-server.test.ts fails if the hook stops
 * taking the method. */
export function guardPort(server: grpc.Server, guard: PortGuard): void {
  const target = server as unknown as { createHttp2Server?: (credentials: unknown) => Http2Server };
  const create = target.createHttp2Server;
  if (typeof create !== 'function') throw new Error('this grpc-js has no createHttp2Server: it cannot be served');
  inflateWithinBudgets();
  // Node's own bound on a client's stream resets (RST_STREAM) counts every reset alike, so a replica that stalls
  // past Envoy's timeout lost Envoy's connection to its late resets: it is lifted, and reset-guard.ts bounds the
  // rapid ones (streams reset before their client could have given up) at the same burst and rate. Its server
  // options are read when createHttp2Server makes the server.
  const options = (server as unknown as { commonServerOptions?: Record<string, unknown> }).commonServerOptions;
  if (!options) throw new Error('this grpc-js has no commonServerOptions: stream resets cannot be bounded');
  Object.assign(options, {
    streamResetBurst: NODE_RESET_UNBOUNDED,
    streamResetRate: NODE_RESET_UNBOUNDED,
    maxSessionRejectedStreams: MAX_REJECTED_STREAMS,
  });
  startResetClock();
  target.createHttp2Server = (credentials: unknown): Http2Server => {
    const h2 = create.call(server, credentials);
    // grpc-js sets maxConcurrentStreams from its options (port-bounds.ts grpcServerOptions); the header list here.
    h2.updateSettings({ maxHeaderListSize: MAX_HEADER_LIST_BYTES });
    gateConnections(h2, guard);
    const others = h2.listeners('stream') as Listener[];
    h2.removeAllListeners('stream');
    h2.on('stream', streamListener(h2, guard, others));
    return h2;
  };
}

/** Connections gated as they open; a session Node ends for a protocol error or a flood (rapid resets among them)
 * has its address paced. */
function gateConnections(h2: Http2Server, guard: PortGuard): void {
  // Node's own listeners (an HTTP/2 session, or a TLS handshake first) run only for a connection let in: a refused
  // one is closed before either is set up, at ~1/10 of the cost (bench/reset-cost.mjs: ~105 µs of CPU a refused
  // connection when Node still set up a session on the closed socket).
  const node = h2.listeners('connection') as Listener[];
  h2.removeAllListeners('connection');
  h2.on('connection', (socket: Socket, ...rest: unknown[]) => {
    const refused = guard.gate.admit(socket);
    if (refused) {
      guard.onRefused?.(refused);
      return;
    }
    for (const l of node) l.call(h2, socket, ...rest);
  });
  h2.on('session', (session: Http2Session) => {
    budgetSession(session, guard.budget);
    guard.onSession?.(session);
    const address = session.socket?.remoteAddress;
    session.on('error', () => {
      guard.gate.penalize(address);
      guard.onRefused?.('protocol');
    });
  });
}

type Listener = (...args: unknown[]) => void;

/** Node's streamResetBurst and streamResetRate past anything a connection sends: reset-guard.ts counts instead. */
const NODE_RESET_UNBOUNDED = 2 ** 31 - 1;

/** Every stream: its refusals counted, then the hot method's to `hot.handle`, the rest screened and to grpc-js. */
function streamListener(h2: Http2Server, guard: PortGuard, others: Listener[]): (s: ServerHttp2Stream, h: IncomingHttpHeaders, f: number, r: string[]) => void {
  const hotPath = guard.hot?.path;
  const handle = guard.hot?.handle;
  // One listener each for every stream ('on': each event comes once), so a call allocates none of its own. A
  // trailers-only refusal is seen as it is sent ('finish': a client may hold its side of the stream open, and
  // 'close' would wait for it); a refusal in trailers, or a reset, when the stream closes.
  const onFinish = function (this: ServerHttp2Stream): void {
    if (sent(this, 'sentHeaders')) countRefusal(this, guard);
  };
  // A refusal of ours counts against the connection; a reset of its client's, unless late (past the client's own
  // deadline), against its allowance of rapid resets (reset-guard.ts), answered or not.
  const onClose = function (this: ServerHttp2Stream): void {
    if (reset(this) || sent(this, 'sentTrailers')) countRefusal(this, guard);
    else if (this.rstCode && !resetLate(this)) countRapidReset(this, guard);
  };
  // The event's four arguments named (Node's 'stream' event: stream, headers, flags, rawHeaders), not a rest
  // parameter: that would build an array on every call, the hot method's too.
  return (stream, headers, flags, rawHeaders) => {
    stream.on('finish', onFinish);
    stream.on('close', onClose);
    noteOpened(stream, headers);
    if (headers[':path'] === hotPath) return handle!(stream, headers);
    // A reset stream emits 'error': a stream answered by the screen has no other listener, and an unheard 'error'
    // would end the process.
    stream.on('error', ignore);
    if (!screenStream(stream, headers, guard.screen)) return;
    // grpc-js takes ~100 us to set up a call: handed over on the next turn, a stream its client reset in the same
    // read (a rapid reset) is gone by then and costs nothing more. Its bytes wait in the stream meanwhile.
    setImmediate(() => {
      if (stream.destroyed || stream.closed) return;
      // A body that ended with nothing in it has emitted 'end' already (Node reads the end of an empty body at
      // once): grpc-js, which listens for it from its first turn on, is told again.
      const ended = stream.readableEnded;
      for (const l of others) l.call(h2, stream, headers, flags, rawHeaders);
      if (ended) stream.emit('end');
    });
  };
}

function ignore(): void {}

const refusals = new WeakMap<Http2Session, number>();
const allowances = new WeakMap<Http2Session, ResetAllowance>();

/** A stream answered RESOURCE_EXHAUSTED, or reset as refused, counts against its connection; past the bound the
 * connection is ended with GOAWAY (ENHANCE_YOUR_CALM) and its address waits out its pace before the next. */
function countRefusal(stream: ServerHttp2Stream, guard: PortGuard): void {
  const session = stream.session;
  if (!session || session.destroyed || session.closed) return;
  const n = (refusals.get(session) ?? 0) + 1;
  refusals.set(session, n);
  if (n < MAX_REFUSALS_PER_CONNECTION) return;
  endConnection(session, guard, 'refusals');
}

/** A rapid reset takes one of its connection's allowance; past it the connection is ended. */
function countRapidReset(stream: ServerHttp2Stream, guard: PortGuard): void {
  // Node has let go of a closed stream's session: the one it opened on.
  const session = openedOn(stream);
  if (!session || session.destroyed || session.closed) return;
  let allowance = allowances.get(session);
  if (!allowance) {
    allowance = new ResetAllowance();
    allowances.set(session, allowance);
  }
  if (!allowance.take()) endConnection(session, guard, 'resets');
}

/** Ends a connection for its refusals or its rapid resets: GOAWAY (ENHANCE_YOUR_CALM), and its address waits
 * out its pace before the next. */
function endConnection(session: Http2Session, guard: PortGuard, reason: 'refusals' | 'resets'): void {
  if (session.destroyed || session.closed) return;
  guard.gate.penalize(session.socket?.remoteAddress);
  guard.onRefused?.(reason);
  // No new stream from here on; those open end as they would (a status each), or with the connection at
  // CLOSE_GRACE_MS (a health watch never ends by itself).
  session.goaway(constants.NGHTTP2_ENHANCE_YOUR_CALM);
  session.close();
  setTimeout(() => session.destroy(), CLOSE_GRACE_MS).unref();
}

/** How long a connection ended for its refusals keeps the streams it had open. */
const CLOSE_GRACE_MS = 10_000;

const EXHAUSTED = String(8); // grpc.status.RESOURCE_EXHAUSTED

function reset(stream: ServerHttp2Stream): boolean {
  const code = stream.rstCode;
  return code === constants.NGHTTP2_REFUSED_STREAM || code === constants.NGHTTP2_ENHANCE_YOUR_CALM;
}

/** Whether the headers or trailers sent carry RESOURCE_EXHAUSTED. */
function sent(stream: ServerHttp2Stream, which: 'sentHeaders' | 'sentTrailers'): boolean {
  // A string from Tollgate, a number from grpc-js (its sendStatus passes status.code as it is).
  return String((stream as unknown as Record<string, IncomingHttpHeaders | undefined>)[which]?.['grpc-status']) === EXHAUSTED;
}
