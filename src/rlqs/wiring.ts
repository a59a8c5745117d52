import type { Logger } from 'pino';
import type { CompiledConfig } from '../config/compiled.js';
import { sharesChannel, storeKey } from '../counters/keys.js';
import type { TierSource } from '../limiter/plan.js';
import { RlqsMetrics } from '../metrics/rlqs-metrics.js';
import type { AssignmentSummary } from '../response/assignment-summary.js';
import type { Settings } from '../settings/settings.js';
import type { StoreStack } from '../store/create-store.js';
import { UNKNOWN_DOMAIN } from './deps.js';
import { InstanceRegistry } from './identity.js';
import { QuotaService } from './quota/quota-service.js';
import { type RlqsServer, rlqsService } from './service.js';
import { RedisShareStore } from './shares/redis-share-store.js';
import { LocalShareEvents, RedisShareEvents, type ShareEvents } from './shares/share-events.js';
import { MemoryShareStore, type ShareStore } from './shares/share-store.js';

/** Wires the Rate Limit Quota Service (docs/rlqs.md): the demand table in the counter store's place (Redis for
 * a fleet, this process with the memory store), the quota service over the same config, tiers and counters as
 * RLS decisions, and the stream handler beside RLS on the gRPC port. */

/** Periodic reports with no request before a bucket is abandoned: a minute at Envoy's 5 s. */
const IDLE_REPORTS = 12;

export interface RlqsWiring {
  config: () => CompiledConfig;
  tiers: TierSource;
  stack: StoreStack;
  registry: ConstructorParameters<typeof RlqsMetrics>[0];
  logger: Logger;
  onAssigned?: (a: AssignmentSummary, startMs: number) => void;
}

export function rlqsServer(settings: Settings, w: RlqsWiring): RlqsServer {
  const table = shareTable(settings, w.stack, w.logger);
  const quota = new QuotaService({
    config: w.config,
    tiers: w.tiers,
    store: w.stack.direct,
    ...table,
    settings: { ...settings.rlqs, globalShadow: settings.shadowMode },
  });
  const server = rlqsService({
    quota,
    instances: new InstanceRegistry(),
    limits: { bounds: settings.bounds, maxBuckets: settings.rlqs.maxBuckets, reportIntervalMs: settings.rlqs.reportIntervalMs, idleReports: IDLE_REPORTS },
    process: settings.rlqs.process,
    logger: w.logger,
    metrics: new RlqsMetrics(w.registry),
    domainLabel: (d) => (w.config().domains.has(d) ? d : UNKNOWN_DOMAIN),
    onAssigned: w.onAssigned,
  });
  const drain = (): void => {
    server.drain();
    quota.close();
    void table.events.close();
  };
  return { implementation: server.implementation, drain, listening: server.listening };
}

/** The share table and its change events: in Redis with the Redis store (every replica), else this process.
 * A report is not on any request's path (Envoy decides locally meanwhile): its round trip may take longer than
 * a decision's, but not long enough to queue reports behind it. The table calls Redis through the counter
 * store, under its health: a Redis that stopped answering is not called (docs/rlqs.md "Failures"). */
function shareTable(settings: Settings, stack: StoreStack, logger: Logger): { shares: ShareStore; events: ShareEvents } {
  if (!stack.redis) return { shares: new MemoryShareStore(settings.maxCounters), events: new LocalShareEvents() };
  const timeoutMs = Math.max(settings.redisTimeoutMs * 10, 250);
  return {
    shares: new RedisShareStore(stack.redis, (key) => storeKey(settings.redisKeyPrefix, key), timeoutMs),
    events: new RedisShareEvents(stack.redis.client, sharesChannel(settings.redisKeyPrefix), logger),
  };
}
