import type { Cluster, Redis } from 'ioredis';
import type { Logger } from 'pino';
import { subscriber } from '../../store/redis-subscriber.js';

/** "An RLQS bucket's shares moved": told to every replica, so each re-assigns its own Envoys of that bucket at
 * once instead of at their next report. A grant that shrank frees room another instance is waiting for; an
 * instance held below its fair share asks the others to shrink. Messages are share keys (fingerprints only). */
export interface ShareEvents {
  publish(key: string): void;
  onChange(listener: (key: string) => void): void;
  close(): Promise<void>;
}

/** A share key as it may arrive: printable ASCII and bounded, so a message nobody meant for this channel is
 * dropped rather than used. */
const SHARE_KEY = /^[\x21-\x7e]{1,1024}$/;

/** This process alone (the memory store): the listeners are called on a later turn, as a remote one would be. */
export class LocalShareEvents implements ShareEvents {
  private readonly listeners: ((key: string) => void)[] = [];

  publish(key: string): void {
    setImmediate(() => {
      for (const l of this.listeners) l(key);
    });
  }

  onChange(listener: (key: string) => void): void {
    this.listeners.push(listener);
  }

  async close(): Promise<void> {}
}

/** Every replica sharing the Redis, over pub/sub (this one included: its own message comes back like the
 * others'). A lost message costs only speed: the next report re-assigns anyway. */
export class RedisShareEvents implements ShareEvents {
  /** Connected at the first listener: a replica no Envoy asks for RLQS holds no extra connection. */
  private subscriber: Redis | Cluster | undefined;
  private readonly listeners: ((key: string) => void)[] = [];

  constructor(
    private readonly client: Redis | Cluster,
    private readonly channel: string,
    private readonly logger: Logger,
  ) {}

  private subscribe(): Redis | Cluster {
    const told = (message: string): void => {
      if (!SHARE_KEY.test(message)) return;
      for (const l of this.listeners) l(message);
    };
    return subscriber(this.client, this.channel, told, (err) => this.logger.warn({ err: err.message }, 'rlqs share events: subscribe failed'));
  }

  publish(key: string): void {
    this.client.publish(this.channel, key).catch(() => undefined); // the next report re-assigns anyway
  }

  onChange(listener: (key: string) => void): void {
    this.subscriber ??= this.subscribe();
    this.listeners.push(listener);
  }

  async close(): Promise<void> {
    this.subscriber?.disconnect();
  }
}
