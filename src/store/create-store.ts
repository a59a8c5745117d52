import type { Logger } from 'pino';
import type { Clock } from '../limiter/clock.js';
import type { Settings } from '../settings.js';
import { PolicyStore } from './failure-policy.js';
import { MemoryStore } from './memory-store.js';
import { OverLimitCache } from './over-limit-cache.js';
import { RedisStore } from './redis-store.js';
import type { Store } from './store.js';

export interface StoreStack {
  /** What the limiter calls. */
  store: Store;
  /** The Redis store underneath, when there is one. */
  redis: RedisStore | undefined;
  cache: OverLimitCache | undefined;
  policy: PolicyStore | undefined;
}

/** memory: counters in this process. redis: the failure policy, around the over-limit cache, around Redis. */
export function createStore(settings: Settings, deps: { logger: Logger; clock?: Clock }): StoreStack {
  const memory = (): MemoryStore => new MemoryStore({ clock: deps.clock, maxCounters: settings.maxCounters, logger: deps.logger });
  if (settings.store === 'memory') return { store: memory(), redis: undefined, cache: undefined, policy: undefined };
  const redis = new RedisStore({
    connection: settings.redis!,
    timeoutMs: settings.redisTimeoutMs,
    keyPrefix: settings.redisKeyPrefix,
    logger: deps.logger,
    sentinelPassword: settings.redisSentinelPassword,
    clock: deps.clock,
  });
  const cache = settings.localCache ? new OverLimitCache(redis, deps.clock) : undefined;
  const policy = new PolicyStore(cache ?? redis, settings.redisFailure, deps.logger, settings.redisFailure === 'local' ? memory() : undefined, deps.clock);
  return { store: policy, redis, cache, policy };
}
