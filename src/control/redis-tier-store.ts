import type { Cluster, Redis } from 'ioredis';
import type { Logger } from 'pino';
import { eventsChannel, tierHashKey } from '../counters/keys.js';
import { redisFailure } from '../store/redis-connection.js';
import { subscriber } from '../store/redis-subscriber.js';
import { withTimeout } from '../store/timeout.js';
import type { TierAssignment, TierStore } from './tier-store.js';

export interface RedisTierStoreOptions {
  client: Redis | Cluster;
  keyPrefix: string;
  logger: Logger;
  /** Full re-read interval, behind pub/sub: bounds how stale a replica can be if a message is lost. */
  refreshMs: number;
  timeoutMs: number;
}

type Event = { kind: 'tiers' } | { kind: 'reset'; keys: string[] };

/** Tier assignments in one Redis hash (`<prefix>tiers`: fingerprint → JSON), mirrored in every replica.
 * A change is published on `<prefix>events`; every replica re-reads the hash on that message and, in any
 * case, every `refreshMs`. Decisions read the mirror only, so a slow or absent Redis never delays them: the
 * last known assignments keep applying. */
export class RedisTierStore implements TierStore {
  readonly shared = true;
  private mirror = new Map<string, TierAssignment>();
  private readonly key: string;
  private readonly channel: string;
  private readonly subscriber: Redis | Cluster;
  private readonly resetListeners: ((keys: readonly string[]) => void)[] = [];
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly opts: RedisTierStoreOptions) {
    this.key = tierHashKey(opts.keyPrefix);
    this.channel = eventsChannel(opts.keyPrefix);
    this.subscriber = subscriber(
      opts.client,
      this.channel,
      (message) => this.onEvent(message),
      (err) => opts.logger.warn({ err: err.message }, 'tier events: subscribe failed'),
    );
  }

  /** Loads the assignments (best effort) and starts the periodic refresh. */
  async start(): Promise<void> {
    await this.refresh();
    this.timer = setInterval(() => void this.refresh(), this.opts.refreshMs);
    this.timer.unref();
  }

  tierOf(fingerprint: string): string | undefined {
    return this.mirror.get(fingerprint)?.tier;
  }

  count(): number {
    return this.mirror.size;
  }

  async assign(a: TierAssignment): Promise<void> {
    await this.call(this.opts.client.hset(this.key, a.fingerprint, JSON.stringify(a)));
    this.mirror.set(a.fingerprint, a);
    await this.publish({ kind: 'tiers' });
  }

  async remove(fingerprint: string): Promise<boolean> {
    const removed = (await this.call(this.opts.client.hdel(this.key, fingerprint))) > 0;
    this.mirror.delete(fingerprint);
    await this.publish({ kind: 'tiers' });
    return removed;
  }

  async list(): Promise<TierAssignment[]> {
    await this.refresh(true);
    return [...this.mirror.values()];
  }

  async announceReset(keys: readonly string[]): Promise<void> {
    await this.publish({ kind: 'reset', keys: [...keys] });
  }

  onReset(listener: (keys: readonly string[]) => void): void {
    this.resetListeners.push(listener);
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    this.subscriber.disconnect();
  }

  /** Replaces the mirror with the hash; on failure keeps the last known assignments. */
  private async refresh(strict = false): Promise<void> {
    try {
      const all = await this.call(this.opts.client.hgetall(this.key));
      const next = new Map<string, TierAssignment>();
      for (const [fp, json] of Object.entries(all)) {
        try {
          next.set(fp, JSON.parse(json) as TierAssignment);
        } catch {
          this.opts.logger.warn({ fingerprint: fp }, 'tier assignment unreadable: ignored');
        }
      }
      this.mirror = next;
    } catch (err) {
      if (strict) throw err;
      this.opts.logger.debug({ err: (err as Error).message }, 'tier refresh failed: keeping the last known assignments');
    }
  }

  private async publish(e: Event): Promise<void> {
    await this.call(this.opts.client.publish(this.channel, JSON.stringify(e)));
  }

  /** One Redis command, bounded. It fails with the errors the counter store raises (store/redis-store.ts),
   * classed the same way, so the admin API maps both alike: our deadline or an error reply from Redis is a
   * StoreUnavailableError; anything else means ioredis had no usable connection. */
  private async call<T>(command: Promise<T>): Promise<T> {
    try {
      return await withTimeout(command, this.opts.timeoutMs);
    } catch (err) {
      throw redisFailure(err);
    }
  }

  private onEvent(message: string): void {
    let e: Event;
    try {
      e = JSON.parse(message) as Event;
    } catch {
      return;
    }
    if (e.kind === 'tiers') void this.refresh();
    else if (e.kind === 'reset') for (const l of this.resetListeners) l(e.keys);
  }
}
