import type { Cluster, Redis } from 'ioredis';
import { windowBounds } from '../counters/calendar.js';
import type { Clock } from '../counters/clock.js';
import { spendTopKey, usageStreamKey, windowKeyParts } from '../counters/keys.js';
import type { CounterCheck } from '../limits/check.js';
import type { ClusterRoutes } from './cluster-routes.js';
import { NODE } from './cluster-routes.js';
import type { Placement } from './redis-batch.js';
import { redisFailure } from './redis-connection.js';
import { fullestFirst, MAX_SPEND_LISTED, type SpendCounter, type SpendPage, type SpendTop, type SpendWindow } from './spend-top.js';
import { withTimeout } from './timeout.js';

/** A read of the lists is the admin API's: it may wait this long for Redis, not a decision's timeout. */
const READ_TIMEOUT_MS = 5000;

/** The spend lists in Redis (spend-top.ts): written by check-and-incr.lua in the step that charges (lua/
 * spend-top.lua), a sorted set of counter tags by share per rule window. On one Redis, one list per window; on a
 * Cluster, one per window on each master (per run of slots it serves), in the same script call as the counters
 * it lists, and read from every master and merged. A Cluster request sent slot by slot through the client's
 * redirects (while the client learns the map, or a slot moves) cannot reach its master's list: it charges, and
 * its counter is listed by its next charge. */
export class RedisSpendTop implements SpendTop {
  constructor(
    private readonly client: Redis | Cluster,
    private readonly prefix: string,
    private readonly routes: ClusterRoutes | undefined,
    /** Tests only: the lists of the window now on this clock. */
    private readonly clock: Clock | undefined,
  ) {}

  /** Where a batch sent to `to` (a queue of redis-store.ts) lists its charged counters (if it can) and writes its
   * ledger events: on one Redis, the one list and stream; on a Cluster master, those of the counter's run of
   * slots; through redirects, the stream of the counter's own slot, and no list. */
  placement(to: string, usageMaxLen: number): Placement {
    if (!this.routes) return { spend: this.onOne, usage: () => usageStreamKey(this.prefix), usageMaxLen };
    if (to.startsWith(NODE)) return { spend: this.onNode, usage: (c) => usageStreamKey(this.prefix, this.routes!.spendTag(c)), usageMaxLen };
    return { spend: undefined, usage: (c) => usageStreamKey(this.prefix, this.routes!.slotTag(c)), usageMaxLen };
  }

  /** The ledger streams the map of slots places (one, or one per master run): what the service's gauges read. */
  usageStreams(): string[] {
    return this.routes ? this.routes.spendTags().map((t) => usageStreamKey(this.prefix, t)) : [usageStreamKey(this.prefix)];
  }

  private readonly onOne = (c: CounterCheck): string => {
    const { counterId, windowName } = windowKeyParts(c.key);
    return spendTopKey(this.prefix, counterId, windowName);
  };

  private readonly onNode = (c: CounterCheck): string | undefined => {
    const tag = this.routes!.spendTag(c);
    if (tag === undefined) return undefined;
    const { counterId, windowName } = windowKeyParts(c.key);
    return spendTopKey(this.prefix, counterId, windowName, tag);
  };

  async read(w: SpendWindow, offset: number, count: number): Promise<SpendPage> {
    const nowMs = this.clock?.now() ?? Date.now();
    const index = w.refills ? '' : `:${windowBounds(nowMs, w.windowMs, w.calendar).index}`;
    const tags = this.routes ? this.routes.spendTags() : [''];
    const upTo = Math.min(offset + count, MAX_SPEND_LISTED) - 1;
    try {
      const lists = await withTimeout(
        Promise.all(tags.map((tag) => this.readOne(`${spendTopKey(this.prefix, w.counterId, w.windowName, tag)}${index}`, upTo))),
        READ_TIMEOUT_MS,
      );
      const listed = lists.reduce((n, l) => n + l.listed, 0);
      return {
        listed,
        counters: fullestFirst(
          lists.map((l) => l.counters),
          offset,
          count,
        ),
      };
    } catch (err) {
      throw redisFailure(err);
    }
  }

  private async readOne(key: string, upTo: number): Promise<{ listed: number; counters: SpendCounter[] }> {
    const [listed, flat] = await Promise.all([this.client.zcard(key), upTo < 0 ? [] : this.client.zrevrange(key, 0, upTo, 'WITHSCORES')]);
    const counters: SpendCounter[] = [];
    for (let i = 0; i + 1 < flat.length; i += 2) counters.push({ counter: flat[i]!, share: Number(flat[i + 1]) });
    return { listed, counters };
  }
}
