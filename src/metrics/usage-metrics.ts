import { Gauge, type Registry } from 'prom-client';
import type { StoreStack } from '../store/create-store.js';
import { UsageStreams } from '../store/usage-streams.js';

/** The longest a scrape waits for Redis's answer. */
const READ_TIMEOUT_MS = 1000;

/** The usage ledger's backlog and losses (docs/spend.md#sizing-the-ledger), by consumer group (an operator's
 * name, `tollgate usage export --group`; '' for the memory ring, read through the admin API): what each group
 * has not read yet, and what the ledger's bound trimmed before the group read it. Read from Redis at each
 * scrape (XINFO), from the ring in memory. */
export function watchUsage(registry: Registry, stack: StoreStack, keyPrefix: string): void {
  const redis = stack.redis;
  const read = redis ? fromRedis(new UsageStreams(redis.client, keyPrefix), () => redis.spendTop.usageStreams()) : fromMemory(stack);
  let last = new Map<string, { waiting: number; dropped: number }>();
  // One reading per scrape, shared by both gauges (a registry collects them at once).
  let reading: Promise<void> | undefined;
  const refresh = (): Promise<void> => {
    reading ??= read()
      .then(
        (now) => {
          last = now;
        },
        () => undefined, // Redis not answering: the last reading stays
      )
      .finally(() => {
        reading = undefined;
      });
    return reading;
  };
  const gauge = (name: string, help: string, pick: 'waiting' | 'dropped'): Gauge =>
    new Gauge({
      name,
      help,
      labelNames: ['group'],
      registers: [registry],
      aggregator: 'max',
      async collect() {
        await refresh();
        this.reset();
        for (const [group, v] of last) this.set({ group }, v[pick]);
      },
    });
  gauge('tollgate_usage_waiting', 'Usage ledger events a consumer group has not read yet (Redis: over every stream)', 'waiting');
  gauge(
    'tollgate_usage_dropped',
    'Usage ledger events trimmed at USAGE_LEDGER_MAX_LEN before the consumer group read them; group "" is the memory ring',
    'dropped',
  );
}

/** The streams the map of slots places (not those a request sent through redirects wrote: the exporter's scan
 * finds those), read with a bound on the wait. */
function fromRedis(streams: UsageStreams, known: () => string[]): () => Promise<Map<string, { waiting: number; dropped: number }>> {
  return () => {
    const timeout = new Promise<never>((_, reject) => setTimeout(() => reject(new Error('timeout')), READ_TIMEOUT_MS).unref());
    return Promise.race([streams.lag(known()), timeout]);
  };
}

function fromMemory(stack: StoreStack): () => Promise<Map<string, { waiting: number; dropped: number }>> {
  return () => {
    const ring = stack.local?.usage;
    if (!ring) return Promise.resolve(new Map());
    return Promise.resolve(new Map([['', { waiting: ring.unread, dropped: ring.dropped }]]));
  };
}
