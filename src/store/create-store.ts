import type { Logger } from 'pino';
import type { Clock } from '../counters/clock.js';
import type { BatchWindow } from './batch-queues.js';
import { type FailurePolicy, PolicyStore } from './failure-policy.js';
import { MemoryStore } from './memory-store.js';
import { OverLimitCache } from './over-limit-cache.js';
import type { RedisConnection } from './redis-connection.js';
import { redisAddress } from './redis-connection.js';
import { RedisStore } from './redis-store.js';
import type { BatchTracer, Store } from './store.js';

/** What the stack is built from (the service's settings carry these names). */
export interface StoreOptions {
  store: 'memory' | 'redis';
  maxCounters: number;
  /** USAGE_LEDGER_MAX_LEN: about how many events the usage ledger keeps (each stream; the memory ring). */
  usageMaxLen: number;
  redis: RedisConnection | undefined;
  redisTimeoutMs: number;
  redisBatch: BatchWindow;
  redisKeyPrefix: string;
  redisSentinelPassword: string | undefined;
  redisFailure: FailurePolicy;
  localCache: boolean;
}

export interface StoreStack {
  /** What the limiter calls. */
  store: Store;
  /** The store itself, measured, without the over-limit cache or the failure policy: what RLQS counts on. The
   * policies decide RLS requests; a report the store cannot count is left unanswered (docs/rlqs.md). */
  direct: Store;
  /** Counters in this process: the store itself (memory), or the fallback of the `local` failure policy. */
  local: MemoryStore | undefined;
  /** The Redis store underneath, when there is one. */
  redis: RedisStore | undefined;
  cache: OverLimitCache | undefined;
  policy: PolicyStore | undefined;
}

export interface StoreDeps {
  logger: Logger;
  clock?: Clock;
  /** Wraps the store that does the real work, under the cache and the failure policy, so what it sees are
   * actual round trips (the service times them with metrics/InstrumentedStore). */
  measure?: (store: Store) => Store;
  /** Traces Redis script calls that carry sampled decisions (tracing/). */
  tracer?: BatchTracer;
}

/** memory: counters in this process. redis: the failure policy, around the over-limit cache, around Redis. */
export function createStore(opts: StoreOptions, deps: StoreDeps): StoreStack {
  const memory = (): MemoryStore => new MemoryStore({ clock: deps.clock, maxCounters: opts.maxCounters, usageMaxLen: opts.usageMaxLen, logger: deps.logger });
  const measured = (s: Store): Store => deps.measure?.(s) ?? s;
  if (opts.store === 'memory') {
    const m = memory();
    const direct = measured(m);
    return { store: direct, direct, local: m, redis: undefined, cache: undefined, policy: undefined };
  }
  const redis = new RedisStore({
    connection: opts.redis!,
    timeoutMs: opts.redisTimeoutMs,
    batch: opts.redisBatch,
    keyPrefix: opts.redisKeyPrefix,
    // Every line of the store names where it connects (host:port of each node), never the credentials.
    logger: deps.logger.child({ redis: redisAddress(opts.redis!) }),
    sentinelPassword: opts.redisSentinelPassword,
    clock: deps.clock,
    tracer: deps.tracer,
    usageMaxLen: opts.usageMaxLen,
  });
  const direct = measured(redis);
  const cache = opts.localCache ? new OverLimitCache(direct, deps.clock) : undefined;
  const fallback = opts.redisFailure === 'local' ? memory() : undefined;
  const policy = new PolicyStore(cache ?? direct, opts.redisFailure, deps.logger, fallback, deps.clock);
  return { store: policy, direct, local: fallback, redis, cache, policy };
}
