import type { Logger } from 'pino';
import type { Clock } from '../limiter/clock.js';
import { InstrumentedStore } from '../metrics/instrumented-store.js';
import type { Metrics } from '../metrics/metrics.js';
import type { Settings } from '../settings.js';
import { PolicyStore } from './failure-policy.js';
import { MemoryStore } from './memory-store.js';
import { OverLimitCache } from './over-limit-cache.js';
import { RedisStore } from './redis-store.js';
import type { Store } from './store.js';

export interface StoreStack {
  /** What the limiter calls. */
  store: Store;
  /** The memory store, when counters are kept in the process. */
  memory: MemoryStore | undefined;
  /** The Redis store underneath, when there is one. */
  redis: RedisStore | undefined;
  cache: OverLimitCache | undefined;
  policy: PolicyStore | undefined;
}

/** memory: counters in this process. redis: the failure policy, around the over-limit cache, around Redis. */
export function createStore(settings: Settings, deps: { logger: Logger; clock?: Clock; metrics?: Metrics }): StoreStack {
  const memory = (): MemoryStore => new MemoryStore({ clock: deps.clock, maxCounters: settings.maxCounters, logger: deps.logger });
  const measured = (s: Store): Store => (deps.metrics ? new InstrumentedStore(s, deps.metrics) : s);
  if (settings.store === 'memory') {
    const m = memory();
    return { store: measured(m), memory: m, redis: undefined, cache: undefined, policy: undefined };
  }
  const redis = new RedisStore({
    connection: settings.redis!,
    timeoutMs: settings.redisTimeoutMs,
    keyPrefix: settings.redisKeyPrefix,
    logger: deps.logger,
    sentinelPassword: settings.redisSentinelPassword,
    clock: deps.clock,
  });
  const cache = settings.localCache ? new OverLimitCache(measured(redis), deps.clock) : undefined;
  const fallback = settings.redisFailure === 'local' ? memory() : undefined;
  const policy = new PolicyStore(cache ?? measured(redis), settings.redisFailure, deps.logger, fallback, deps.clock);
  return { store: policy, memory: fallback, redis, cache, policy };
}
