import { hostname } from 'node:os';
import { fingerprint } from '../fingerprint.js';

/** Who an RLQS stream belongs to. Envoy sends no node id or metadata of its own on the stream (its
 * global_client_impl.cc opens it with default options), and keeps one stream per process and (server, domain).
 * So an instance is the stream's peer address: a pod's IP, the same on whichever replica the stream lands, so
 * an Envoy reconnecting to another replica keeps its demand entry and its share. A peer on 127.0.0.1 or ::1 is
 * an Envoy beside this replica (the sidecar shape), which only this replica sees: it is named after this host.
 * Several streams at once from one address for one domain (two Envoys behind one address, or an Envoy that
 * opens one per worker, as releases before 2024 did) are told apart by the order they opened in. Only the
 * fingerprint leaves this file. */
/** Streams open at once from one address (an Envoy keeps one per domain), and in all. */
export const MAX_STREAMS_PER_HOST = 64;
export const MAX_STREAMS = 10_000;

export class InstanceRegistry {
  private readonly open = new Map<string, Set<number>>();
  private readonly perHost = new Map<string, number>();
  private total = 0;

  constructor(
    private readonly replicaName = hostname(),
    private readonly maxStreams = MAX_STREAMS,
  ) {}

  /** The instance of a new stream for `domain` from `peer` (grpc-js's getPeer(): host:port); release() it at
   * the stream's end. Undefined past the bounds: MAX_STREAMS_PER_HOST from one address (each would be an
   * instance with a share of its own), `maxStreams` in all. */
  claim(domain: string, peer: string): { instance: string; release: () => void } | undefined {
    const host = peerHost(peer);
    const who = host === '127.0.0.1' || host === '::1' ? `local:${this.replicaName}` : host;
    const fromHost = this.perHost.get(who) ?? 0;
    if (fromHost >= MAX_STREAMS_PER_HOST || this.total >= this.maxStreams) return undefined;
    this.perHost.set(who, fromHost + 1);
    this.total++;
    const slot = `${domain}\n${who}`;
    const taken = this.open.get(slot) ?? new Set<number>();
    this.open.set(slot, taken);
    let n = 0;
    while (taken.has(n)) n++;
    taken.add(n);
    const release = (): void => {
      taken.delete(n);
      if (taken.size === 0 && this.open.get(slot) === taken) this.open.delete(slot);
      const left = (this.perHost.get(who) ?? 1) - 1;
      if (left > 0) this.perHost.set(who, left);
      else this.perHost.delete(who);
      this.total--;
    };
    return { instance: fingerprint(`${who}#${n}`), release };
  }
}

/** The host of a grpc-js peer, always host:port: "1.2.3.4:5", "[::1]:5", "::1:5" (IPv6 without brackets),
 * "ipv4:1.2.3.4:5", "::ffff:1.2.3.4:5" (an IPv4 client on a dual-stack listener). */
export function peerHost(peer: string): string {
  let p = peer.replace(/^ipv[46]:/, '');
  const bracket = /^\[([^\]]*)\](?::\d+)?$/.exec(p);
  if (bracket) p = bracket[1]!;
  else p = p.replace(/:\d+$/, '');
  return p.replace(/^::ffff:/, '');
}
