import { Cluster, type Redis } from 'ioredis';

/** A connection of its own that listens on one channel, subscribed again after every reconnect. Not by ioredis's
 * own resubscription (autoResubscribe): it sends SUBSCRIBE without handling its failure, and with the offline
 * queue off (redis-connection.ts) that fails when the connection drops again between its ready check and the
 * SUBSCRIBE: an unhandled rejection, which ends a Node process. A Cluster's subscriber is a connection ioredis
 * makes with its offline queue on, which resubscribes through it. */
export function subscriber(client: Redis | Cluster, channel: string, onMessage: (message: string) => void, onFailure: (err: Error) => void): Redis | Cluster {
  const sub = client instanceof Cluster ? client.duplicate() : client.duplicate({ autoResubscribe: false });
  const subscribe = (): void => void sub.subscribe(channel).catch(onFailure);
  if (sub instanceof Cluster) sub.once('ready', subscribe);
  else sub.on('ready', subscribe);
  sub.on('error', () => undefined); // the store's client logs connection trouble
  sub.on('message', (_channel: string, message: string) => onMessage(message));
  return sub;
}
