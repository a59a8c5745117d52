import { Cluster, type Redis } from 'ioredis';

/** The first wait before a Cluster's failed SUBSCRIBE is sent again, doubled up to RETRY_MOST_MS. */
const RETRY_FIRST_MS = 500;
const RETRY_MOST_MS = 30_000;

/** A connection of its own that listens on one channel, subscribed again after every reconnect, by us:
 * - Not by ioredis's own resubscription (autoResubscribe): it sends SUBSCRIBE without handling its failure, and
 *   with the offline queue off (redis-connection.ts) that fails when the connection drops again between its
 *   ready check and the SUBSCRIBE: an unhandled rejection, which ends a Node process, and a channel lost.
 * - A Cluster subscribes through a connection of its own that ioredis replaces when it fails, carrying over only
 *   the channels Redis confirmed, and without a new 'ready': a SUBSCRIBE that failed is sent again while the
 *   Cluster is up, backing off. Subscribing twice is harmless (Redis and ioredis keep a set of channels). */
export function subscriber(client: Redis | Cluster, channel: string, onMessage: (message: string) => void, onFailure: (err: Error) => void): Redis | Cluster {
  const sub = client instanceof Cluster ? client.duplicate() : client.duplicate({ autoResubscribe: false });
  let waitMs = RETRY_FIRST_MS;
  let retry: NodeJS.Timeout | undefined;
  const subscribe = (): void => {
    sub.subscribe(channel).then(
      () => (waitMs = RETRY_FIRST_MS),
      (err: Error) => {
        onFailure(err);
        if (!(sub instanceof Cluster) || retry) return; // a Redis subscribes again at its next 'ready'
        retry = setTimeout(() => {
          retry = undefined;
          if (sub.status === 'ready') subscribe();
        }, waitMs).unref();
        waitMs = Math.min(RETRY_MOST_MS, waitMs * 2);
      },
    );
  };
  sub.on('ready', subscribe);
  sub.on('error', () => undefined); // the store's client logs connection trouble
  sub.on('message', (_channel: string, message: string) => onMessage(message));
  return sub;
}
