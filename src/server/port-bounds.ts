/** What one client at the gRPC port may make a replica hold, on both servers (GRPC_SERVER=http2 and grpc-js share
 * the HTTP/2 server grpc-js makes: hot-path.ts). Each bound's default, its memory cost and what a client sees
 * when it hits it are in docs/security.md "Bounds"; the figures below are why each one never limits Envoy. */

/** SETTINGS_MAX_CONCURRENT_STREAMS advertised on every connection (RFC 9113 asks for no less than 100). Envoy's
 * rate-limit filter sends each call with a grpc-timeout of its `timeout` (20 ms by default, 50 ms in the shipped
 * envoy.yaml), so a connection holds at most rate × timeout calls: 100 streams are 2,000 calls a second even if
 * every call took the full 50 ms, and 33,000–100,000 at a replica's 1–3 ms, about what one replica decides in all
 * (~40,000 a second). When an Envoy does reach it, its HTTP/2 pool opens another connection (a server's limit
 * caps a connection's capacity in Envoy's pool) instead of queueing. RLQS streams (at most 32 a connection,
 * rlqs/bounds.ts) and health watches are a few of them. A held stream costs ~5–9 KB (round 5: 200,000 held
 * streams were 1.1–1.8 GB), so a connection's streams hold at most ~1 MB; each new stream's headers cost the
 * CPU to decode them, which is why the bound is not higher. */
export const MAX_CONCURRENT_STREAMS = 100;

/** SETTINGS_MAX_HEADER_LIST_SIZE, and Node's own check of each stream's decoded headers. Envoy's call carries a
 * few hundred bytes of headers (path, content type, grpc-timeout, its x-envoy-* and tracing headers); 16 KiB
 * leaves room for an operator's initial_metadata and refuses an HPACK bomb (16 references to a 3.8 KB table
 * entry a stream decode to 60 KB) before it is held. */
export const MAX_HEADER_LIST_BYTES = 16 * 1024;

/** grpc-js's maxSessionMemory (Node's unit: MB): the header tables, open streams and data queued for a client
 * to read. grpc-js sets it to Number.MAX_SAFE_INTEGER; past it Node refuses the session's new streams
 * (ENHANCE_YOUR_CALM), so a client that never reads its answers stops being answered instead of growing the
 * replica. Envoy reads its answers at once: a few KB queued. */
export const MAX_SESSION_MEMORY_MB = 8;

/** The largest ShouldRateLimit message taken, as sent or inflated. A real request is a few hundred bytes to a few
 * KB: descriptors are made of the request's headers and route, and Envoy takes at most 60 KiB of request headers
 * (max_request_headers_kb's default). 256 KiB holds that budget four times over (rls/request.ts lets one value be
 * 64 KiB); grpc-js's 4 MiB default let one call inflate to 4 MiB. Past it: RESOURCE_EXHAUSTED. */
export const MAX_RLS_MESSAGE_BYTES = 256 * 1024;

/** grpc-js's receive limit for the methods it serves (RLQS and health; every method under GRPC_SERVER=grpc-js):
 * its default, 4 MiB, kept. An RLQS usage report names every bucket of an Envoy (100,000 buckets are ~2.5 MB), and
 * RLQS streams are bounded on their own (rlqs/bounds.ts); a compressed stream holds this much of the byte budget
 * while it is open, so its inflation is bounded too. */
export const MAX_GRPC_JS_MESSAGE_BYTES = 4 * 1024 * 1024;

/** Bytes of request messages held at once (buffered as they arrive, or inflated), per connection and in all.
 * Taken before they are held: a call that would pass either is answered RESOURCE_EXHAUSTED, and holds nothing. */
export const MAX_HELD_BYTES_PER_CONNECTION = 8 * 1024 * 1024;
export const MAX_HELD_BYTES = 64 * 1024 * 1024;

/** A unary call without grpc-timeout is ended at this deadline (DEADLINE_EXCEEDED) instead of being kept while
 * its connection lives. Envoy always sends one (its filter's timeout); a call without is a client of another
 * kind, and 10 s is well past any answer the service gives. */
export const DEFAULT_DEADLINE_MS = 10_000;

/** Connections open at once from one address, and in all. An Envoy keeps one connection per worker thread (its
 * --concurrency, up to the node's cores) and opens more only past MAX_CONCURRENT_STREAMS; several Envoys behind
 * one address (a NAT) share the bound, which is twice RLQS's 64 streams an address (rlqs/bounds.ts), so that bound
 * stays the one an RLQS fleet behind one address meets. A connection costs ~30–60 KB idle (more under TLS). */
export const MAX_CONNECTIONS_PER_ADDRESS = 128;
export const MAX_CONNECTIONS = 4096;

/** New connections from one address are paced: a burst of the per-address bound (every Envoy behind it
 * reconnecting after a restart), then 8 a second. A client that opens a connection per call, or reconnects as
 * fast as its connections are ended for abuse, waits at this pace; Envoy keeps its connections. */
export const NEW_CONNECTIONS_BURST = MAX_CONNECTIONS_PER_ADDRESS;
export const NEW_CONNECTIONS_PER_SECOND = 8;

/** A connection whose streams are refused this many times (RESOURCE_EXHAUSTED, or refused by a bound) is ended
 * with GOAWAY (ENHANCE_YOUR_CALM), and its address waits a second (more for each repeat, up to a burst's time)
 * before its next connection; so too when Node ends a connection for a protocol error or a flood (rapid resets:
 * Node allows a burst of 1,000, then 33 a second). A refusal then costs its client a connection, and refusals
 * cost the replica no more than their bytes however fast they are asked for. */
export const MAX_REFUSALS_PER_CONNECTION = 64;

/** Rapid stream resets a connection's client may send: a burst, then so many a second; past them the connection
 * is ended and its address paced (reset-guard.ts; Node's own streamResetBurst and streamResetRate, 1,000 and 33,
 * counted late resets too and are lifted). Envoy's resets at its own timeout are late and never counted, however
 * many a stall brings. A client resetting its streams at once costs the replica each stream's headers: Node's
 * 1,000 a connection, times the connections of a burst, was a 200 ms stall for every other client. */
export const RESET_BURST = 200;
export const RESET_RATE = 33;

/** Streams Node refuses in a row (ENHANCE_YOUR_CALM, without a stream object) before it ends the connection:
 * Node's maxSessionRejectedStreams, 100 by default. Node counts a stream as open until this process has run its
 * close, so after a stall the streams Envoy opened and reset meanwhile are read in one go and the new ones past
 * 100 are refused: 100 in a row ended Envoy's connection. 20,000 is a 5 s stall at 4,000 calls a second on one
 * connection; 2,000 (a 500 ms stall) lost it when a busy machine made a 500 ms stall read as 700 ms, and 3 runs
 * of 3 at 1,100 ms (test/integration/late-resets.test.ts). Each refusal costs the replica a header block decoded
 * in C++, never a decision; the count restarts at each stream taken, so the bound stops a broken client, not an
 * attacker (who is bounded by the streams it may hold and its rapid resets: reset-guard.ts). */
export const MAX_REJECTED_STREAMS = 20_000;

/** An HTTP/2 PING to every client after this long without one, and the connection closed when one goes
 * unanswered for KEEPALIVE_TIMEOUT_MS (grpc-js's keepalive; its default is 2 hours). A client whose node was lost
 * sends no FIN: its connection ends within 20 s, and with it the renewals of its in-flight slots
 * (limiter/slot-keeper.ts). A ping costs a live client 17 bytes each way. */
export const KEEPALIVE_MS = 15_000;
export const KEEPALIVE_TIMEOUT_MS = 5_000;

/** grpc-js's server options for the bounds it applies itself. */
export function grpcServerOptions(): Record<string, number> {
  return {
    'grpc.keepalive_time_ms': KEEPALIVE_MS,
    'grpc.keepalive_timeout_ms': KEEPALIVE_TIMEOUT_MS,
    'grpc.max_concurrent_streams': MAX_CONCURRENT_STREAMS,
    'grpc-node.max_session_memory': MAX_SESSION_MEMORY_MB,
    'grpc.max_receive_message_length': MAX_GRPC_JS_MESSAGE_BYTES,
  };
}
