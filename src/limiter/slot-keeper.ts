import type { Http2Session } from 'node:http2';
import type { CompiledConfig } from '../config/compiled.js';
import type { HeldSlot, Renewal, SlotLeases } from '../store/store.js';
import { inWaves } from '../store/waves.js';

/** Slots that live as long as their request, and die soon after their Envoy (docs/in-flight.md, "Long streams").
 *
 * Envoy sends nothing while a request runs: its request-phase call takes a slot, its stream-done call gives it
 * back (ratelimit.cc). What it does keep is its connection: its gRPC client holds an HTTP/2 connection to the
 * rate-limit cluster per worker, open while the process lives, and the kernel closes it when the process dies.
 * So a slot of a rule with `max_hold` is taken with a short lease and renewed, a lease at a time, while the
 * connection it was taken on is open, up to max_hold after its take. The list of what to renew is in the
 * store, per connection (SlotLeases): when this replica stops (a rolling restart), it moves each connection's
 * list onto its Envoy's (`base`: the x-tollgate-peer header's fingerprint, else its address's), which every
 * replica with a connection from that Envoy renews. An Envoy that is killed closes its connections: nothing
 * renews its slots, and they come back within a lease.
 *
 * Data flows one way: the server names a call's connection (server/peers.ts), the limiter notes what it took
 * on it (held), and this renews through the store. */

/** The header that names the Envoy a call comes from: Envoy sends it on every call when its GrpcService's
 * `initial_metadata` lists it. Without it, an Envoy is its connection's address (a pod's IP). Only its
 * fingerprint is kept (server/peers.ts). */
export const PEER_HEADER = 'x-tollgate-peer';

/** A connection calls come on, as the server names it. */
export interface PeerConn {
  /** This connection's list: unique to it (this replica's nonce and a sequence number). */
  readonly id: string;
  /** Its Envoy's list: the fingerprint of what names the Envoy. */
  readonly base: string;
  /** Set by the keeper when it closed: a decision that lands after that (its call was on the wire) names a
   * connection that is gone, which must not be renewed again. */
  ended?: 'drained' | 'closed';
}

/** Where the handler asks which connection a call came on (server/peers.ts): undefined while no rule has
 * max_hold. `header`: the call's x-tollgate-peer. */
export interface PeerSource {
  /** Every HTTP/2 session of the gRPC port, as it is set up. */
  opened(session: Http2Session): void;
  /** Whether a rule has max_hold now: a call's connection is named only then. */
  active(): boolean;
  of(session: Http2Session | undefined, header: unknown): PeerConn | undefined;
  ofGrpc(peer: string, header: unknown): PeerConn | undefined;
}

export interface KeeperEvents {
  renewed(r: Renewal): void;
  /** Slots that could not be listed (a list at its bound): they keep the one lease they were taken with. */
  unlisted(n: number): void;
  failed(what: 'note' | 'renew' | 'move', err: unknown): void;
}

/** Renewals a pass runs at once, at most: each is a read of a list and a script call per counter. */
const PASS_WIDTH = 32;

export class SlotKeeper {
  /** Open connections calls came on here, and the Envoys they are of (with how many connections). */
  private readonly conns = new Map<string, PeerConn>();
  /** Those of them that took renewed slots: lists of their own to renew. */
  private readonly noted = new Set<string>();
  /** Those whose Envoy said GOAWAY. */
  private readonly draining = new Set<string>();
  private readonly bases = new Map<string, number>();
  /** The config the period was last worked out for: every call asks (server/peers.ts), configs change rarely. */
  private periodOf: { config: CompiledConfig | undefined; period: number | undefined } = { config: undefined, period: undefined };
  private timer: NodeJS.Timeout | undefined;
  private running = false;
  private stopped = false;

  constructor(
    private readonly leases: SlotLeases,
    private readonly config: () => CompiledConfig,
    private readonly events: KeeperEvents,
  ) {}

  /** The renewal period of the config in force (a third of its shortest renewed lease), or undefined when no
   * rule has max_hold: then no call names its connection, and nothing runs. */
  period(): number | undefined {
    const config = this.config();
    if (this.periodOf.config === config) return this.periodOf.period;
    let lease: number | undefined;
    for (const d of config.domains.values()) for (const r of d.rules) if (r.inFlight?.maxHoldMs) lease = Math.min(lease ?? Infinity, r.inFlight.leaseMs);
    const period = lease === undefined ? undefined : Math.max(250, Math.floor(lease / 3));
    this.periodOf = { config, period };
    return period;
  }

  /** A connection's first call while a rule has max_hold (server/peers.ts): its Envoy is alive, so the list
   * of that Envoy (slots another replica moved onto it as it stopped) is renewed here from now on. */
  opened(conn: PeerConn): void {
    if (this.stopped || conn.ended || this.conns.has(conn.id)) return;
    this.conns.set(conn.id, conn);
    this.bases.set(conn.base, (this.bases.get(conn.base) ?? 0) + 1);
    this.schedule();
  }

  /** Slots the limiter took on `conn` for rules with max_hold. */
  held(conn: PeerConn, slots: readonly HeldSlot[]): void {
    // A connection closed while its call was decided: a drained one's Envoy lives on and renews them; a
    // closed one's slots keep the lease they were taken with.
    if (conn.ended === 'closed') return;
    if (this.stopped || conn.ended === 'drained') {
      this.note(listOfBase(conn.base), slots);
      return;
    }
    this.opened(conn);
    this.noted.add(conn.id);
    this.schedule();
    this.note(listOfConn(conn.id), slots);
  }

  /** Its Envoy said GOAWAY: it drains the connection and lives on (an idle timeout, a cluster update, a hot
   * restart), so the connection's slots go onto the Envoy's list when it closes. */
  drained(conn: PeerConn): void {
    if (this.conns.has(conn.id)) this.draining.add(conn.id);
  }

  /** A connection that closed: its slots are no longer renewed here (they end within a lease), unless its
   * Envoy drained it: then they are its Envoy's, renewed while it has a connection to any replica. */
  closed(conn: PeerConn): void {
    if (this.stopped || !this.conns.delete(conn.id)) return;
    conn.ended = this.draining.delete(conn.id) ? 'drained' : 'closed';
    if (conn.ended === 'drained' && this.noted.has(conn.id)) this.move(conn);
    this.noted.delete(conn.id);
    const n = (this.bases.get(conn.base) ?? 1) - 1;
    if (n > 0) this.bases.set(conn.base, n);
    else this.bases.delete(conn.base);
  }

  /** Envoys with a connection here that took renewed slots (a gauge). */
  get peers(): number {
    return this.bases.size;
  }

  /** This replica stops: each connection's list moves onto its Envoy's, which the replica that Envoy connects
   * to next renews; connections that close from now on are not ends. Resolves when the lists are moved. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    const moves = [...this.conns.values()].filter((c) => this.noted.has(c.id)).map((c) => this.move(c));
    this.conns.clear();
    this.noted.clear();
    this.draining.clear();
    this.bases.clear();
    await Promise.all(moves);
  }

  /** One pass: every open connection's list, and the list of every Envoy with an open connection. */
  async renewAll(): Promise<void> {
    if (this.running) return;
    this.running = true;
    try {
      const lists = [...[...this.noted].map(listOfConn), ...[...this.bases.keys()].map(listOfBase)];
      // A store that fails (frozen, unreachable) is not sent the rest of the pass: its commands would only queue
      // up behind the first ones, and a lease covers the next pass.
      const renew = (l: string): Promise<void> =>
        this.leases.renew(l).then(
          (r) => this.events.renewed(r),
          (err: unknown) => {
            this.events.failed('renew', err);
            throw err;
          },
        );
      await inWaves(lists, PASS_WIDTH, renew).catch(() => undefined);
    } finally {
      this.running = false;
    }
  }

  private move(conn: PeerConn): Promise<void> {
    return this.leases.move(listOfConn(conn.id), listOfBase(conn.base)).then(
      (left) => void (left > 0 && this.events.unlisted(left)),
      (err: unknown) => this.events.failed('move', err),
    );
  }

  private note(list: string, slots: readonly HeldSlot[]): void {
    this.leases.note(list, slots).then(
      (left) => left > 0 && this.events.unlisted(left),
      (err: unknown) => this.events.failed('note', err),
    );
  }

  /** The next pass, a period from now, while anything is to be renewed and the config has max_hold rules. */
  private schedule(): void {
    if (this.timer || this.stopped) return;
    const period = this.period();
    if (period === undefined || this.conns.size === 0) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.renewAll().finally(() => this.schedule());
    }, period);
    this.timer.unref();
  }
}

const listOfConn = (id: string): string => `c:${id}`;
const listOfBase = (base: string): string => `b:${base}`;
