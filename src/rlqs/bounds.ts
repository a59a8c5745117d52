import { peerHost } from './identity.js';

/** What one RLQS client may hold of a replica, counted before it is spent (docs/rlqs.md "Bounds"): streams when
 * they open (not at their first message, so silent streams count), and buckets when a stream takes a new one.
 * Both per address and in all, so no single address, and no crowd of them, takes what the others need. */

/** Streams open at once from one address (an Envoy keeps one per domain; releases before 2024 one per worker). */
export const MAX_STREAMS_PER_ADDRESS = 64;
/** Streams open at once on one HTTP/2 connection (one Envoy process). */
export const MAX_STREAMS_PER_CONNECTION = 32;
/** Buckets held at once by the streams of one address: two streams' worth at the default stream bound. */
export const MAX_BUCKETS_PER_ADDRESS = 20_000;

export interface RlqsBoundSettings {
  /** Streams open at once in all. */
  maxStreams: number;
  /** Buckets held at once in all. */
  maxBuckets: number;
}

/** A count kept per key and in all, each with its own most. */
class Tally {
  private readonly byKey = new Map<string, number>();
  private total = 0;

  constructor(
    private readonly perKey: number,
    private readonly inAll: number,
  ) {}

  /** Whether `n` more fit under both bounds. */
  fits(key: string, n: number): boolean {
    return (this.byKey.get(key) ?? 0) + n <= this.perKey && this.total + n <= this.inAll;
  }

  add(key: string, n: number): void {
    const left = (this.byKey.get(key) ?? 0) + n;
    if (left > 0) this.byKey.set(key, left);
    else this.byKey.delete(key);
    this.total += n;
  }

  get size(): number {
    return this.total;
  }
}

/** Why a stream was not let in. */
export type StreamRefusal = 'address' | 'connection' | 'total';

export class RlqsBounds {
  private readonly streams: Tally;
  private readonly connections = new Map<string, number>();
  private readonly buckets: Tally;

  constructor(readonly settings: RlqsBoundSettings) {
    this.streams = new Tally(MAX_STREAMS_PER_ADDRESS, settings.maxStreams);
    this.buckets = new Tally(MAX_BUCKETS_PER_ADDRESS, settings.maxBuckets);
  }

  /** A stream opening from `peer` (host:port, one per TCP connection): its release, or why it may not open. */
  openStream(peer: string): { release: () => void } | { refused: StreamRefusal } {
    const host = peerHost(peer);
    const onConnection = this.connections.get(peer) ?? 0;
    if (onConnection >= MAX_STREAMS_PER_CONNECTION) return { refused: 'connection' };
    if (!this.streams.fits(host, 1)) return { refused: this.streams.size >= this.settings.maxStreams ? 'total' : 'address' };
    this.streams.add(host, 1);
    this.connections.set(peer, onConnection + 1);
    let released = false;
    const release = (): void => {
      if (released) return;
      released = true;
      this.streams.add(host, -1);
      const left = (this.connections.get(peer) ?? 1) - 1;
      if (left > 0) this.connections.set(peer, left);
      else this.connections.delete(peer);
    };
    return { release };
  }

  /** A budget of buckets for the streams of `peer`'s address. */
  bucketBudget(peer: string): BucketBudget {
    const host = peerHost(peer);
    return {
      take: () => {
        if (!this.buckets.fits(host, 1)) return false;
        this.buckets.add(host, 1);
        return true;
      },
      give: (n) => this.buckets.add(host, -n),
    };
  }
}

/** What a stream's buckets draw on: take() one for a new bucket (false past a bound), give() back when they go. */
export interface BucketBudget {
  take(): boolean;
  give(n: number): void;
}

/** No bound beyond the stream's own (tests of one stream). */
export const UNBOUNDED_BUDGET: BucketBudget = { take: () => true, give: () => undefined };
