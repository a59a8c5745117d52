import type { Logger } from 'pino';
import type { CompiledConfig } from './config/compiled.js';
import { configLimits, NO_CONFIG_WARNING } from './config/load.js';
import type { ReloadOutcome } from './config/watcher.js';
import { type ConfigSource, configSource, initialConfig, logNotes } from './config-source.js';
import { type AdminDeps, type AdminHandler, adminApi } from './control/admin-api.js';
import { RedisTierStore } from './control/redis-tier-store.js';
import { MemoryTierStore, type TierStore } from './control/tier-store.js';
import { type Clock, systemClock } from './counters/clock.js';
import { type HeapTrim, startHeapTrim } from './heap-trim.js';
import { type Explanation, explain } from './limiter/explain.js';
import { type DecisionInput, Limiter } from './limiter/limiter.js';
import { type CensusEvents, SlotCensusRunner } from './limiter/slot-census.js';
import { SlotKeeper } from './limiter/slot-keeper.js';
import { InstrumentedStore } from './metrics/instrumented-store.js';
import { Metrics } from './metrics/metrics.js';
import { watchUsage } from './metrics/usage-metrics.js';
import type { DecisionObserver } from './observe/observer.js';
import type { AssignmentSummary } from './response/assignment-summary.js';
import { rlqsServer } from './rlqs/wiring.js';
import type { HandlerDeps } from './rls/ratelimit-handler.js';
import { HealthService } from './server/health.js';
import { Peers } from './server/peers.js';
import { RLQS_SERVICE, RLS_SERVICE } from './server/proto.js';
import { streamsOpened } from './server/reset-guard.js';
import { type Readiness, startServers, stopAll } from './servers.js';
import type { Settings } from './settings/settings.js';
import { logServing, quietLibraries } from './startup-notes.js';
import { createStore, type StoreStack } from './store/create-store.js';
import { redisAddress } from './store/redis-connection.js';
import { readRedisMemory } from './store/redis-info.js';
import type { BatchTracer, Store } from './store/store.js';
import type { SpanOutcome } from './tracing/export.js';
import type { Tracing } from './tracing/tracing.js';
import { VERSION } from './version.js';

export { logSettingNotes } from './startup-notes.js';

export interface ServiceOptions {
  logger: Logger;
  clock?: Clock;
  /** Tier assignments made by the caller (tests); otherwise Redis-backed with the Redis store, else in memory. */
  tiers?: TierStore;
}

export interface RunningService {
  grpcPort: number;
  /** GRPC_PLAINTEXT_PORT's port, when set. */
  grpcPlaintextPort: number | undefined;
  httpPort: number;
  /** The admin API's port; undefined when the admin API is off. */
  adminPort: number | undefined;
  /** USE_PROMETHEUS's metrics port; undefined when it is off. */
  prometheusPort: number | undefined;
  config: () => CompiledConfig;
  store: Store;
  stack: StoreStack;
  health: HealthService;
  metrics: Metrics;
  tiers: TierStore;
  /** The census of in_flight rules (limiter/slot-census.ts): tests run it when they choose. */
  census: SlotCensusRunner | undefined;
  /** Re-reads the config directory now (the watcher does this by itself); resolves once it is done. */
  reload: () => Promise<ReloadOutcome>;
  /** Reports NOT_SERVING, stops accepting, lets in-flight calls finish (up to the timeout), closes the store. */
  stop(): Promise<void>;
}

/** Wires config, store, limiter and both servers. Throws (ConfigError, ListenError) before serving anything. */
export async function startService(settings: Settings, opts: ServiceOptions): Promise<RunningService> {
  const { logger } = opts;
  const clock = opts.clock ?? systemClock;
  quietLibraries(settings, logger);
  const limits = configLimits(settings.maxConfigBytes, settings.mergeDomainConfig, settings.calendarMonths);
  // From xDS, the first config arrives once the stream is up: until then, none (decisions answer UNAVAILABLE).
  const initial = initialConfig(settings, limits);
  let config = initial.config;
  logNotes(logger, config);
  const metrics = serviceMetrics(settings, () => config, clock);
  const { tracing, observer, onAssigned } = await observability(settings, metrics, logger);
  const { stack, tiers } = await openStores(settings, { logger, clock: opts.clock, metrics, tiers: opts.tiers, tracer: tracing });
  const { store } = stack;

  const health = new HealthService([RLS_SERVICE, RLQS_SERVICE]);
  const source = configSource(settings, limits, initial, { logger, metrics, clock, stack, onReady: () => health.set(true) }, (next) => (config = next));
  const keeper = slotKeeper(stack, () => config, metrics);
  const census = slotCensus(stack, () => config, metrics, logger);
  const modes = planModes(settings);
  const limiter = new Limiter({ config: () => config, store, keeper, census, tiers, ...modes, clock: opts.clock });
  const handler = { ...handlerDeps(settings, { limiter, logger, metrics, observer }), peers: keeper && new Peers(keeper) };
  const ready = readiness(health, stack, settings, source);
  const onLocalReset = (keys: readonly string[]): void => stack.cache?.forget(keys);
  const spend = (stack.redis ?? stack.local)?.spendTop;
  const usage = stack.redis ? undefined : stack.local?.usage;
  watchUsage(metrics.registry, stack, settings.redisKeyPrefix);
  const admin = adminFor(settings, { tiers, config: () => config, store, logger, onLocalReset, inFlight: () => census?.all() ?? [], spend, usage });
  // The same plan a decision would make, Envoy's limits and --shadow-mode included, with live counters.
  const explainLive = (input: DecisionInput): Promise<Explanation> => explain(config, tiers, input, { store, ...modes });
  const rlqs = rlqsServer(settings, { config: () => config, tiers, stack, registry: metrics.registry, logger, onAssigned });
  const servers = await startServers(settings, { handler, rlqs: rlqs.implementation, health, ready, explain: explainLive, admin, logger }).catch(
    async (err: unknown) => {
      await Promise.all([tiers.close(), store.close()]);
      throw err;
    },
  );
  rlqs.listening(servers.grpcPort);
  census?.start();
  source.start();
  health.set(source.waiting() === undefined);
  if (config.domains.size === 0 && settings.xdsServers.length === 0) logger.warn({ dir: settings.configDir }, NO_CONFIG_WARNING);
  logServing(logger, settings, { servers, store, config, adminApi: Boolean(admin), sharedTiers: tiers.shared });
  const trim = heapTrim(settings, metrics, logger);
  const stop = async (): Promise<void> => {
    // NOT_SERVING before anything else is closed: health checkers and Envoy see it at once, whatever the rest waits on.
    health.set(false);
    // Before GOAWAY: the slots renewed for connections here become their Envoys', for the next replica.
    await keeper?.stop();
    census?.stop();
    trim.stop();
    source.stop();
    rlqs.drain();
    await tiers.close();
    await stopAll({ grpcServer: servers.grpc, https: servers.https, health, store, logger, timeoutMs: settings.shutdownTimeoutMs });
    await tracing?.shutdown(Math.min(settings.shutdownTimeoutMs, 5000));
  };
  const { grpcPort, grpcPlaintextPort, httpPort, adminPort, prometheusPort } = servers;
  const reload = () => source.reload();
  return { grpcPort, grpcPlaintextPort, httpPort, adminPort, prometheusPort, config: () => config, store, stack, health, metrics, reload, tiers, census, stop };
}

/** The service's metrics, from the first config on: its budget rules' utilization is read from the one in force. */
function serviceMetrics(settings: Settings, config: () => CompiledConfig, clock: Clock): Metrics {
  const metrics = new Metrics({ nearLimitRatio: settings.nearLimitRatio });
  metrics.configLoaded(config().hash, clock.now());
  metrics.watchBudgets(config, () => clock.now());
  metrics.gauge('tollgate_build_info', 'Always 1, labelled with the running version', () => 1, { version: VERSION, node: process.version }, 'max');
  return metrics;
}

/** The admin API, when TOLLGATE_ADMIN_TOKEN turns it on. */
function adminFor(settings: Settings, deps: Omit<AdminDeps, 'adminToken'>): AdminHandler | undefined {
  return settings.adminToken ? adminApi({ adminToken: settings.adminToken, ...deps }) : undefined;
}

/** Renews the slots of rules with max_hold while their Envoy is connected, in the store itself (Redis, or this
 * process's memory): limiter/slot-keeper.ts. */
function slotKeeper(stack: StoreStack, config: () => CompiledConfig, metrics: Metrics): SlotKeeper | undefined {
  const leases = (stack.redis ?? stack.local)?.slotLeases;
  if (!leases) return undefined;
  const keeper = new SlotKeeper(leases, config, metrics.budget.slots.keeper());
  metrics.gauge('tollgate_in_flight_peers', 'Envoys connected here whose slots are renewed (rules with max_hold)', () => keeper.peers);
  return keeper;
}

/** What is held, counted where it is (limiter/slot-census.ts), in the store itself. */
function slotCensus(stack: StoreStack, config: () => CompiledConfig, metrics: Metrics, logger: Logger): SlotCensusRunner | undefined {
  const counts = (stack.redis ?? stack.local)?.slotCensus;
  if (!counts) return undefined;
  const counted = metrics.budget.slots.censusEvents(() => runner.all());
  // Ended leases are give-backs that never came: one line per rule and census that found some (rule names only).
  const events: CensusEvents = {
    counted: (c) => {
      counted.counted(c);
      const { expired, held } = c.census;
      if (expired > 0) logger.info({ domain: c.domain, rule: c.rule.id, expired, held }, 'in-flight leases ended unreturned');
    },
    failed: (err) => counted.failed(err),
  };
  const runner: SlotCensusRunner = new SlotCensusRunner(counts, config, events);
  return runner;
}

/** The service-wide modes every plan starts from (limiter/plan.ts PlanContext). */
function planModes(settings: Settings): { globalShadow: boolean; globalQuota: boolean; globalCharge: boolean; xdsCharge: boolean } {
  return { globalShadow: settings.shadowMode, globalQuota: settings.quotaMode, globalCharge: settings.countPastLimit, xdsCharge: settings.xdsCountPastLimit };
}

/** What the RLS handler (and /json) takes from the settings. */
function handlerDeps(settings: Settings, d: Pick<HandlerDeps, 'limiter' | 'logger' | 'metrics' | 'observer'>): HandlerDeps {
  return { ...d, bounds: settings.bounds, dynamicMetadata: settings.responseDynamicMetadata, responses: settings.responses };
}

/** The counter store (timed by the metrics where it makes round trips) and the tier assignments: in Redis with
 * the Redis store, else in this process. Serving starts even when Redis is not reachable yet. */
async function openStores(
  settings: Settings,
  deps: { logger: Logger; clock: Clock | undefined; metrics: Metrics; tiers: TierStore | undefined; tracer: BatchTracer | undefined },
): Promise<{ stack: StoreStack; tiers: TierStore }> {
  const { logger, metrics } = deps;
  const stack = createStore(settings, { logger, clock: deps.clock, measure: (s) => new InstrumentedStore(s, metrics), tracer: deps.tracer });
  if (stack.redis && !(await stack.redis.waitReady(2000))) {
    const at = redisAddress(settings.redis!);
    logger.warn({ redis: at, policy: settings.redisFailure }, `redis not reachable at ${at} at start: serving under the failure policy until it is`);
  }
  const tiers = deps.tiers ?? (await createTierStore(settings, stack, logger));
  tiers.onReset((keys) => stack.cache?.forget(keys));
  // A refund (or a Cluster give-back: store/across-parts.ts) on one replica frees room every replica's over-limit
  // cache may hold as full (envoyproxy/ratelimit #1230 found the same gap in its local cache): told like a reset.
  // Only shared stores have other replicas.
  if (stack.cache && tiers.shared) {
    stack.cache.onRefund = (keys) => void tiers.announceReset(keys).catch((err: Error) => logger.debug({ err: err.message }, 'refund announce failed'));
  }
  registerGauges(metrics, stack, tiers, settings.redisTimeoutMs);
  return { stack, tiers };
}

/** Tracing (TRACING_ENABLED) and the decision log (DECISION_LOG), loaded only when one is on: a service with
 * both off loads no OpenTelemetry module and its decisions take no step for them. An export that fails is
 * counted, and logged at most once a minute (the collector's address is config, never request text). */
async function observability(
  settings: Settings,
  metrics: Metrics,
  logger: Logger,
): Promise<{ tracing: Tracing | undefined; observer: DecisionObserver | undefined; onAssigned: AssignedObserver | undefined }> {
  if (!settings.tracing && settings.decisionLog.mode === 'off') return { tracing: undefined, observer: undefined, onAssigned: undefined };
  const counters = metrics.observability();
  let loggedAt = -Infinity;
  const outcome = (result: SpanOutcome, n: number, err?: Error): void => {
    counters.spans.inc({ result }, n);
    if (result === 'exported' || Date.now() - loggedAt < 60_000) return;
    loggedAt = Date.now();
    logger.warn(
      { result, spans: n, err: err?.message },
      result === 'queue_full' ? 'trace spans dropped: the export queue is full (is the collector slow or down?)' : 'trace export failed: spans lost',
    );
  };
  const { Tracing } = await import('./tracing/tracing.js');
  const tracing = settings.tracing && (await Tracing.create({ ...settings.tracing, version: VERSION }, settings.store, outcome));
  const { DecisionLog } = await import('./observe/decision-log.js');
  const { mode, maxPerSecond } = settings.decisionLog;
  const log = mode === 'off' ? undefined : new DecisionLog(logger, { mode, maxPerSecond, onDropped: (n) => counters.decisionLinesDropped.inc(n) });
  const { DecisionObserver } = await import('./observe/observer.js');
  if (tracing)
    metrics.gauge(
      'tollgate_tracing_queue_spans',
      'Finished spans held for export (queued or being sent); at OTEL_BSP_MAX_QUEUE_SIZE new ones are dropped',
      () => tracing.queued,
    );
  // RLQS answers: a span each (sampled as traces that start here) and a decision-log line (docs/rlqs.md).
  const onAssigned: AssignedObserver = (a, startMs) => {
    if (tracing) tracing.assigned(a, startMs);
    log?.assigned(a);
  };
  return { tracing: tracing || undefined, observer: new DecisionObserver(tracing || undefined, log), onAssigned };
}

type AssignedObserver = (a: AssignmentSummary, startMs: number) => void;

/** /readyz: a config to decide by (or FORCE_START_WITHOUT_INITIAL_CONFIG), serving, and the store usable or
 * its failure absorbed by the policy. READY_REQUIRES_STORE absorbs nothing: a central replica that lost its store
 * leaves the Service, so Envoy asks one that still counts (docs/kubernetes.md, "Readiness"). */
function readiness(health: HealthService, stack: StoreStack, settings: Settings, source: ConfigSource): Readiness {
  return () => {
    const waiting = source.waiting();
    if (waiting !== undefined) return { ready: false, reason: waiting };
    if (!health.serving) return { ready: false, reason: 'shutting down' };
    const h = stack.store.health();
    if (!h.degraded) return { ready: true };
    const absorbed = !settings.readyRequiresStore && (stack.policy?.absorbs() ?? false);
    const why = settings.readyRequiresStore ? 'READY_REQUIRES_STORE' : `policy ${settings.redisFailure}`;
    return { ready: absorbed, reason: `store degraded (${h.reason}), ${why}` };
  };
}

async function createTierStore(settings: Settings, stack: StoreStack, logger: Logger): Promise<TierStore> {
  if (!stack.redis) return new MemoryTierStore();
  const store = new RedisTierStore({
    client: stack.redis.client,
    keyPrefix: settings.redisKeyPrefix,
    logger,
    refreshMs: settings.tierRefreshMs,
    timeoutMs: Math.max(settings.redisTimeoutMs * 4, 100),
  });
  await store.start();
  return store;
}

/** A heap grown by a burst given back once quiet (heap-trim.ts), and counted. */
function heapTrim(settings: Settings, metrics: Metrics, logger: Logger): HeapTrim {
  const trim = startHeapTrim(settings.heapTrimMs, { logger, calls: streamsOpened });
  metrics.gauge('tollgate_heap_trims', 'Times a heap grown by a burst was given back to the system once quiet, since start', () => trim.trims);
  return trim;
}

function registerGauges(metrics: Metrics, stack: StoreStack, tiers: TierStore, redisTimeoutMs: number): void {
  const kind = stack.store.kind;
  metrics.initStore(kind);
  metrics.gauge(
    'tollgate_store_degraded',
    'Whether the store is failing (1) or answering (0)',
    () => (stack.store.health().degraded ? 1 : 0),
    { store: kind },
    'max',
  );
  metrics.gauge(
    'tollgate_store_fallback_active',
    'Whether decisions use local fallback counters because the store is down',
    () => (stack.policy?.inFallback ? 1 : 0),
    {},
    'max',
  );
  const settlements = stack.policy?.settlements;
  if (settlements) {
    metrics.gauge('tollgate_settlements_waiting', 'Stream-end settlements kept while the store does not answer, sent when it does', () => settlements.size);
    metrics.gauge(
      'tollgate_settlements_dropped',
      'Stream-end settlements dropped at a bound of that queue since start (their tokens never counted)',
      () => settlements.dropped,
    );
  }
  metrics.gauge('tollgate_tier_assignments', 'Clients assigned to a tier', () => tiers.count(), {}, 'max'); // shared through Redis
  if (stack.local) {
    const memory = stack.local;
    metrics.gauge('tollgate_memory_store_counters', 'Counters held by the in-process store', () => memory.size);
    metrics.gauge('tollgate_memory_store_evictions', 'Counters evicted since start because the in-process store was full', () => memory.evictions);
    const slotEvictions = 'In-flight holders evicted since start to make room, from the counters holding most';
    metrics.gauge('tollgate_memory_store_slot_evictions', slotEvictions, () => memory.slots.evictions);
    const reservationEvictions = 'Open reservations ended early since start to make room, from the counters holding most';
    metrics.gauge('tollgate_memory_store_reservation_evictions', reservationEvictions, () => memory.reservations.evictions);
  }
  if (stack.redis) {
    const client = stack.redis.client;
    metrics.redisMemory(() => readRedisMemory(client, Math.max(redisTimeoutMs, 250)));
  }
  if (stack.cache) {
    const cache = stack.cache;
    metrics.gauge('tollgate_local_cache_entries', 'Windows known to be full, answered without the store', () => cache.size);
  }
}
