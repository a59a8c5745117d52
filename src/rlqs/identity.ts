import { hostname } from 'node:os';
import { fingerprint } from '../fingerprint.js';

/** The header an operator sets per Envoy (the RLQS GrpcService's `initial_metadata`, a literal rendered per pod:
 * docs/rlqs.md "Which Envoy is which") to name it where its address is shared (a NAT, a proxy, one host). */
export const INSTANCE_HEADER = 'x-tollgate-instance';
/** The longest name it may carry, in bytes; visible ASCII only (what a gRPC text header may hold). */
export const MAX_INSTANCE_NAME = 128;

/** Why a stream's instance header is refused (a length only, never its text), or undefined if it may be used. */
export function badInstanceName(name: string): string | undefined {
  if (name.length === 0 || name.length > MAX_INSTANCE_NAME) return `${INSTANCE_HEADER} is ${name.length} bytes: 1 to ${MAX_INSTANCE_NAME} are allowed`;
  if (!/^[\x21-\x7e]+$/.test(name)) return `${INSTANCE_HEADER} holds a character other than visible ASCII`;
  return undefined;
}

/** Who an RLQS stream belongs to. Envoy sends no node id or metadata of its own on the stream (its
 * global_client_impl.cc opens it with default options), and keeps one stream per process and (server, domain).
 * So an instance is the stream's peer address: a pod's IP, the same on whichever replica the stream lands, so
 * an Envoy reconnecting to another replica keeps its demand entry and its share. A peer on 127.0.0.1 or ::1 is
 * an Envoy beside this replica (the sidecar shape), which only this replica sees: it is named after this host.
 * Several streams at once from one address for one domain (two Envoys behind one address, or an Envoy that
 * opens one per worker, as releases before 2024 did) are told apart by the order they opened in. Where the
 * address is shared, an operator names each Envoy with INSTANCE_HEADER, which then identifies it instead. The
 * replica's own name is its host and gRPC port, so two replicas on one host name their loopback Envoys apart.
 * Only the fingerprint leaves this file. */
export class InstanceRegistry {
  private readonly open = new Map<string, Set<number>>();
  private replicaName: string;

  constructor(replicaName = hostname()) {
    this.replicaName = replicaName;
  }

  /** Names this replica after its host and the gRPC port it listens on, once bound. */
  listening(port: number): void {
    this.replicaName = `${hostname()}:${port}`;
  }

  /** The instance of a stream for `domain` from `peer` (grpc-js's getPeer(): host:port), or named by its
   * INSTANCE_HEADER (`named`, checked by badInstanceName), at its first message; release() it at the stream's end.
   * How many streams may open is bounds.ts's to say, at open. */
  claim(domain: string, peer: string, named?: string): { instance: string; release: () => void } {
    const host = peerHost(peer);
    // A name counts within its address: a client elsewhere cannot take over another Envoy's entry by its name.
    const who = named !== undefined ? `named:${host}/${named}` : host === '127.0.0.1' || host === '::1' ? `local:${this.replicaName}` : host;
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
