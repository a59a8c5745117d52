import type { Socket } from 'node:net';

/** Connections to the gRPC port, counted per address and in all, and new ones paced per address
 * (port-bounds.ts): a connection past a bound, or sooner than its address's pace allows, is closed as it opens,
 * before TLS or HTTP/2 cost anything. An address's tokens drain when its connection is ended for abuse
 * (`penalize`), so a client that is cut off cannot come straight back. */

export interface GateBounds {
  perAddress: number;
  inAll: number;
  burst: number;
  perSecond: number;
}

/** Why a connection was closed as it opened. */
export type GateRefusal = 'address' | 'total' | 'pace';

interface AddressState {
  open: number;
  tokens: number;
  at: number;
}

/** Addresses remembered past this many are swept of those with no connection and a full bucket. */
const SWEEP_AT = 10_000;

export class ConnectionGate {
  private readonly addresses = new Map<string, AddressState>();
  private open = 0;
  /** The next sweep's size: twice what a sweep left, so sweeping costs O(1) a connection however many come. */
  private sweepAt = SWEEP_AT;

  constructor(
    private readonly bounds: GateBounds,
    private readonly now: () => number = Date.now,
  ) {}

  /** A connection opening: undefined if let in (its close is counted), else why it was closed. */
  admit(socket: Socket): GateRefusal | undefined {
    const address = socket.remoteAddress ?? '';
    const state = this.state(address);
    let refusal: GateRefusal | undefined;
    if (this.open >= this.bounds.inAll) refusal = 'total';
    else if (state.open >= this.bounds.perAddress) refusal = 'address';
    else if (state.tokens < 1) refusal = 'pace';
    if (refusal) {
      socket.destroy();
      return refusal;
    }
    state.tokens -= 1;
    state.open += 1;
    this.open += 1;
    socket.once('close', () => {
      state.open -= 1;
      this.open -= 1;
    });
    return undefined;
  }

  /** The address of a connection ended for abuse waits a second before its next, a second more for each repeat
   * while it waits, up to a whole burst's time. */
  penalize(address: string | undefined): void {
    const state = this.addresses.get(address ?? '');
    if (state) state.tokens = Math.max(-this.bounds.burst, Math.min(state.tokens, 0) - this.bounds.perSecond);
  }

  /** Connections open now, in all. */
  get size(): number {
    return this.open;
  }

  private state(address: string): AddressState {
    const t = this.now();
    let state = this.addresses.get(address);
    if (!state) {
      if (this.addresses.size >= this.sweepAt) this.sweep(t);
      state = { open: 0, tokens: this.bounds.burst, at: t };
      this.addresses.set(address, state);
      return state;
    }
    state.tokens = Math.min(this.bounds.burst, state.tokens + ((t - state.at) / 1000) * this.bounds.perSecond);
    state.at = t;
    return state;
  }

  private sweep(t: number): void {
    for (const [address, s] of this.addresses) {
      const tokens = s.tokens + ((t - s.at) / 1000) * this.bounds.perSecond;
      if (s.open === 0 && tokens >= this.bounds.burst) this.addresses.delete(address);
    }
    this.sweepAt = Math.max(SWEEP_AT, 2 * this.addresses.size);
  }
}
