import { readFileSync } from 'node:fs';

/** What the kernel holds unread on each established TCP connection whose local port is `port` (and remote
 * port `peer`, when given), from /proc/net/tcp and tcp6. It lets a test wait for a request to have arrived
 * instead of sleeping: bytes waiting at a frozen server mean the request reached it; 0 at a running server's
 * end of a connection means it has read what was sent. */
export function unreadBytes(port: number, peer?: number): number[] {
  const out: number[] = [];
  for (const file of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch {
      continue; // no IPv6
    }
    for (const line of text.split('\n').slice(1)) {
      // sl local_address rem_address st tx_queue:rx_queue …, addresses as HEX:PORT; st 01 = ESTABLISHED
      const [, local, remote, state, queues] = line.trim().split(/\s+/);
      if (state !== '01' || !local || !remote || !queues) continue;
      if (hexPort(local) !== port || (peer !== undefined && hexPort(remote) !== peer)) continue;
      out.push(parseInt(queues.split(':')[1]!, 16));
    }
  }
  return out;
}

const hexPort = (address: string): number => parseInt(address.slice(address.lastIndexOf(':') + 1), 16);
