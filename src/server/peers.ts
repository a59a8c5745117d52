import { randomBytes } from 'node:crypto';
import type { Http2Session } from 'node:http2';
import { fingerprint } from '../fingerprint.js';
import type { PeerConn, PeerSource, SlotKeeper } from '../limiter/slot-keeper.js';

/** A longer value is not a name: the address stands instead. */
const MAX_PEER_CHARS = 256;

/** Names the connection each call came on, for the slot keeper (limiter/slot-keeper.ts), only while a rule has
 * max_hold: the usual call pays one look at the config's period. A connection (an HTTP/2 session) is named
 * once, at its first such call; the keeper hears when it closes, and whether its Envoy said GOAWAY first (an
 * Envoy that drains a connection lives on; one that is killed sends none). On grpc-js a call shows its
 * connection only by address and port (`getPeer()`), so sessions are kept by those until they close. */
export class Peers implements PeerSource {
  private readonly named = new WeakMap<Http2Session, PeerConn>();
  private readonly byAddress = new Map<string, Http2Session>();
  /** This process's: a connection's list is its own, whatever other replicas number theirs. */
  private readonly nonce = randomBytes(8).toString('hex');
  private seq = 0;

  constructor(private readonly keeper: SlotKeeper) {}

  /** Every session of the port (server/hot-path.ts): kept by address for grpc-js's calls, and heard for GOAWAY. */
  opened(session: Http2Session): void {
    const socket = session.socket;
    const at = `${socket?.remoteAddress}:${socket?.remotePort}`;
    this.byAddress.set(at, session);
    session.once('close', () => {
      if (this.byAddress.get(at) === session) this.byAddress.delete(at);
    });
    session.once('goaway', () => {
      const conn = this.named.get(session);
      if (conn) this.keeper.drained(conn);
    });
  }

  active(): boolean {
    return this.keeper.period() !== undefined;
  }

  /** The connection of a call on node:http2; `header`: its x-tollgate-peer. */
  of(session: Http2Session | undefined, header: unknown): PeerConn | undefined {
    if (session === undefined) return undefined;
    const known = this.named.get(session);
    if (known) return known;
    // A connection gone before its call is decided: its 'close' has been, and would never end its renewals.
    if (session.destroyed || session.closed) return undefined;
    const conn: PeerConn = { id: `${this.nonce}.${++this.seq}`, base: baseOf(header, session.socket?.remoteAddress) };
    this.named.set(session, conn);
    session.once('close', () => this.keeper.closed(conn));
    this.keeper.opened(conn);
    return conn;
  }

  /** The connection of a grpc-js call, by its `getPeer()`. */
  ofGrpc(peer: string, header: unknown): PeerConn | undefined {
    return this.of(this.byAddress.get(peer), header);
  }
}

/** What names an Envoy, fingerprinted: its x-tollgate-peer, else its address. A value with a `%` is Envoy's
 * format text sent as it is (a call made without the request's stream info, as a stream-done call may be), the
 * same from every Envoy: not a name. */
function baseOf(header: unknown, address: string | undefined): string {
  const named = typeof header === 'string' && header.length > 0 && header.length <= MAX_PEER_CHARS && !header.includes('%');
  return fingerprint(named ? `peer ${header}` : `address ${address}`);
}
