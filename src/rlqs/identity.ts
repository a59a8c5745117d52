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
export class InstanceRegistry {
  private readonly open = new Map<string, Set<number>>();

  constructor(private readonly replicaName = hostname()) {}

  /** The instance of a stream for `domain` from `peer` (grpc-js's getPeer(): host:port), named at its first
   * message; release() it at the stream's end. How many streams may open is bounds.ts's to say, at open. */
  claim(domain: string, peer: string): { instance: string; release: () => void } {
    const host = peerHost(peer);
    const who = host === '127.0.0.1' || host === '::1' ? `local:${this.replicaName}` : host;
    const slot = `${domain}\n${who}`;
    const taken = this.open.get(slot) ?? new Set<number>();
    this.open.set(slot, taken);
    let n = 0;
    while (taken.has(n)) n++;
    taken.add(n);
    const release = (): void => {
      taken.delete(n);
      if (taken.size === 0 && this.open.get(slot) === taken) this.open.delete(slot);
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
