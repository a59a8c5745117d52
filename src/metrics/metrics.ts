import { type Aggregator, Counter, collectDefaultMetrics, Gauge, type LabelValues, Registry } from 'prom-client';
import type { CompiledConfig, Rule } from '../config/compiled.js';
import type { Decision } from '../limiter/limiter.js';
import type { RedisMemory } from '../store/redis-info.js';
import { CONNECT_FAILURE_REASONS } from '../xds/connect-failure.js';
import { BudgetMetrics } from './budget-metrics.js';
import { BudgetShare } from './budget-share.js';
import { type CounterSeries, cachedSeries, FastCounter, FastHistogram, ScrapedSeries } from './series.js';

/** Every metric Tollgate exports (docs/operations.md has the table). Labels name configured things only (domain, rule
 * path, category, window), never a token, fingerprint or other request value, so 10,000 tokens add no series. */

export interface XdsMetrics {
  responses: Counter<'result'>;
  streamErrors: Counter<'code'>;
  connectFailures: Counter<'reason'>;
  lastApplied: Gauge;
}

export interface MetricsOptions {
  /** A window counts as near its limit once this share of it is used (envoyproxy/ratelimit's default 0.8). */
  nearLimitRatio: number;
}

const RESULTS = ['ok', 'over_limit', 'shadow_over_limit'] as const;
const SOURCES = ['store', 'cache', 'fallback', 'policy', 'none'] as const;
const NONE = '(none)';
/** Why a call got no decision (tollgate_unchecked_total): every gRPC error answer, and answers too late to count. */
export const UNCHECKED_REASONS = ['store_unavailable', 'no_config', 'late', 'invalid_request', 'internal_error'] as const;
export type UncheckedReason = (typeof UNCHECKED_REASONS)[number];
const UNKNOWN_DOMAIN = '(unknown)';

type Child = CounterSeries;

/** Label children of one rule, created on first use: the hot path only indexes arrays and maps. */
interface RuleChildren {
  labels: { domain: string; rule: string; category: string };
  hits: Child;
  /** Indexed by result × source. */
  decisions: (Child | undefined)[];
  near: Map<string, Child>;
  over: Map<string, Child>;
  /** charge_mode's series, by event ('charged' for tollgate_charged_hits_total). */
  charges: Map<string, Child>;
}

export class Metrics {
  readonly registry = new Registry();
  private readonly nearRatio: number;
  private readonly byRule = new WeakMap<Rule, RuleChildren>();
  private readonly unmatched = new Map<string, RuleChildren>();
  private readonly requestsByDomain = new Map<string, Child[]>();

  // The metrics every decision touches: observed without allocating (series.ts).
  readonly requests = new FastCounter('tollgate_requests_total', 'ShouldRateLimit calls answered, by domain and overall result', this.registry);
  readonly decisions = new FastCounter(
    'tollgate_decisions_total',
    'Descriptor decisions by rule and result (ok, over_limit, shadow_over_limit) and where they came from (store, cache, fallback, policy, none)',
    this.registry,
  );
  readonly hits = new FastCounter('tollgate_hits_total', 'Hits asked for, by rule (envoyproxy/ratelimit total_hits)', this.registry);
  readonly nearLimit = new FastCounter(
    'tollgate_near_limit_total',
    'Admitted descriptors whose window is used beyond the near-limit ratio, by window',
    this.registry,
  );
  readonly overLimit = new FastCounter(
    'tollgate_over_limit_total',
    'Windows found full, by window (shadow windows included; see tollgate_decisions_total for the verdict)',
    this.registry,
  );
  /** charge_mode, reservations, refunds and in-flight slots (budget-metrics.ts). */
  readonly budget = new BudgetMetrics(this.registry);
  readonly latency = new FastHistogram(
    'tollgate_should_rate_limit_duration_seconds',
    'Time to answer ShouldRateLimit, from decoded request to response',
    this.registry,
    [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1],
  );
  private readonly latencySeries = this.latency.labels({});
  readonly grpcErrors = new Counter({
    name: 'tollgate_grpc_errors_total',
    help: 'ShouldRateLimit calls answered with an error, by gRPC status code',
    labelNames: ['code'] as const,
    registers: [this.registry],
  });
  readonly unchecked = new Counter({
    name: 'tollgate_unchecked_total',
    help:
      "ShouldRateLimit calls answered without a decision, so Envoy's failure_mode_deny decides (false, the shipped envoy.yaml: admitted " +
      'unchecked), by reason: store_unavailable (REDIS_FAILURE_POLICY=allow), no_config (before the first xDS config), late (after the ' +
      "caller's deadline), invalid_request, internal_error",
    labelNames: ['reason'] as const,
    registers: [this.registry],
  });
  readonly portRefusals = new Counter({
    name: 'tollgate_grpc_connections_refused_total',
    help: 'gRPC connections closed by a bound of the port (docs/security.md "Bounds"), by reason: address, total, pace, refusals, resets, protocol',
    labelNames: ['reason'] as const,
    registers: [this.registry],
  });
  readonly tlsReloadFailures = new Counter({
    name: 'tollgate_tls_reload_failures_total',
    help: 'gRPC TLS files that changed and could not be used: the last good ones stay in force (docs/security.md)',
    registers: [this.registry],
  });
  readonly unhandledRejections = new Counter({
    name: 'tollgate_unhandled_rejections_total',
    help: 'Promises rejected with no handler (a bug in Tollgate or a library): each logged, and the service went on (process-guard.ts)',
    registers: [this.registry],
  });
  readonly httpErrors = new Counter({
    name: 'tollgate_http_errors_total',
    help: 'HTTP calls answered with an error, by endpoint (/json, /explain, /admin, …, other) and HTTP status (gRPC calls count in tollgate_grpc_errors_total)',
    labelNames: ['endpoint', 'code'] as const,
    registers: [this.registry],
  });
  readonly storeLatency = new FastHistogram(
    'tollgate_store_duration_seconds',
    'Round trip of one store call (one per decision that reaches the store)',
    this.registry,
    [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05],
  );
  readonly storeErrors = new Counter({
    name: 'tollgate_store_errors_total',
    help: 'Store calls that failed, by kind (timeout, connection, degraded, other)',
    labelNames: ['store', 'kind'] as const,
    registers: [this.registry],
  });
  readonly configReloads = new Counter({
    name: 'tollgate_config_reloads_total',
    help: 'Descriptor config reloads by result (success, failure)',
    labelNames: ['result'] as const,
    registers: [this.registry],
  });
  // Under --workers the primary aggregates every worker's registry (workers.ts): counters and histograms are
  // summed; each gauge says how its values combine, as its meaning asks.
  readonly configInfo = new Gauge({
    name: 'tollgate_config_info',
    help: 'The loaded descriptor config: 1 with its hash as a label',
    labelNames: ['hash'] as const,
    registers: [this.registry],
    aggregator: 'max',
  });
  readonly configLoadedAt = new Gauge({
    name: 'tollgate_config_last_success_timestamp_seconds',
    help: 'When the loaded descriptor config was loaded (Unix seconds; with --workers, the oldest of them)',
    registers: [this.registry],
    aggregator: 'min',
  });

  /** The budget rules' limits and fullest shares (budget-share.ts), read from the config in force. */
  watchBudgets(config: () => CompiledConfig, now: () => number): void {
    this.budget.share ??= new BudgetShare(this.registry, config, now);
  }

  constructor(opts: MetricsOptions) {
    this.nearRatio = opts.nearLimitRatio;
    // Unprefixed, so stock Node.js dashboards work.
    collectDefaultMetrics({ register: this.registry });
    // Series that exist from the start (at 0), so rate() and increase() have data before the first event.
    for (const result of ['success', 'failure']) this.configReloads.inc({ result }, 0);
    for (const reason of UNCHECKED_REASONS) this.unchecked.inc({ reason }, 0);
  }

  private xdsCounters: XdsMetrics | undefined;

  /** The xDS config source's series, made when it is used. */
  xds(): XdsMetrics {
    if (!this.xdsCounters) {
      const responses = new Counter({
        name: 'tollgate_xds_responses_total',
        help: 'xDS responses by what became of them: applied (ACKed), nacked (invalid: the last good config stays), refused (a type not asked for)',
        labelNames: ['result'] as const,
        registers: [this.registry],
      });
      for (const result of ['applied', 'nacked', 'refused']) responses.inc({ result }, 0);
      const streamErrors = new Counter({
        name: 'tollgate_xds_stream_errors_total',
        help: 'xDS streams that broke, by gRPC status code (ENDED: closed by the server)',
        labelNames: ['code'] as const,
        registers: [this.registry],
      });
      const connectFailures = new Counter({
        name: 'tollgate_xds_connect_failures_total',
        help: 'Attempts to connect to the xDS server that failed, by reason (refused, tls_handshake, certificate_name, client_certificate, plaintext_peer, …)',
        labelNames: ['reason'] as const,
        registers: [this.registry],
      });
      for (const reason of CONNECT_FAILURE_REASONS) connectFailures.inc({ reason }, 0);
      const lastApplied = new Gauge({
        name: 'tollgate_xds_last_applied_timestamp_seconds',
        help: 'When the last xDS response was applied (Unix seconds; with --workers, the oldest of them)',
        registers: [this.registry],
        aggregator: 'min',
      });
      this.xdsCounters = { responses, streamErrors, connectFailures, lastApplied };
    }
    return this.xdsCounters;
  }

  /** Tracing's and the decision log's series (made when either is on): what became of each finished span,
   * and decision lines dropped by their per-second bound. */
  observability(): { spans: Counter<'result'>; decisionLinesDropped: Counter } {
    if (!this.observabilityCounters) {
      const spans = new Counter({
        name: 'tollgate_tracing_spans_total',
        help:
          'Finished sampled spans by what became of them: exported, export_failed (the collector refused or could not be reached), queue_full ' +
          '(dropped: the export queue was full)',
        labelNames: ['result'] as const,
        registers: [this.registry],
      });
      for (const result of ['exported', 'export_failed', 'queue_full']) spans.inc({ result }, 0);
      const decisionLinesDropped = new Counter({
        name: 'tollgate_decision_log_dropped_total',
        help: 'Decision log lines not written because DECISION_LOG_MAX_PER_SECOND was reached',
        registers: [this.registry],
      });
      this.observabilityCounters = { spans, decisionLinesDropped };
    }
    return this.observabilityCounters;
  }

  private observabilityCounters: { spans: Counter<'result'>; decisionLinesDropped: Counter } | undefined;

  /** Redis's memory and evictions, read once per scrape (`read`: INFO on every master, bounded in time). A failed
   * read leaves the series out rather than repeat stale numbers; tollgate_store_degraded says why. Under --workers every
   * worker reads the same Redis, so the primary keeps the largest value instead of a sum. */
  redisMemory(read: () => Promise<RedisMemory>): void {
    let pending: Promise<RedisMemory | undefined> | undefined;
    const once = (): Promise<RedisMemory | undefined> => {
      pending ??= read()
        .catch(() => undefined)
        .finally(() => setImmediate(() => (pending = undefined)));
      return pending;
    };
    const fields: [string, string, keyof RedisMemory, 'gauge' | 'counter'][] = [
      ['tollgate_redis_used_memory_bytes', 'Memory Redis uses (used_memory, summed over masters)', 'usedBytes', 'gauge'],
      ['tollgate_redis_maxmemory_bytes', "Redis's maxmemory, summed over masters (0: no limit)", 'maxBytes', 'gauge'],
      [
        'tollgate_redis_evicted_keys_total',
        'Keys Redis evicted since it started (evicted_keys): evicted counters are limits forgotten',
        'evictedKeys',
        'counter',
      ],
    ];
    for (const [name, help, field, type] of fields) new ScrapedSeries(name, help, type, 'max', async () => (await once())?.[field], this.registry);
  }

  /** Zero series for every kind of store error, for the same reason. */
  initStore(store: string): void {
    for (const kind of ['timeout', 'connection', 'degraded', 'cluster_moving', 'wrong_type', 'out_of_memory', 'other'])
      this.storeErrors.inc({ store, kind }, 0);
  }

  /** A gauge whose value is read at scrape time; `aggregator`: how --workers combines the workers' values. */
  gauge(name: string, help: string, read: () => number, labels: Record<string, string> = {}, aggregator: Aggregator = 'sum'): void {
    const labelNames = Object.keys(labels);
    new Gauge({
      name,
      help,
      labelNames,
      aggregator,
      registers: [this.registry],
      collect() {
        if (labelNames.length) this.set(labels as LabelValues<string>, read());
        else this.set(read());
      },
    });
  }

  configLoaded(hash: string, atMs: number): void {
    this.configInfo.reset();
    this.configInfo.set({ hash }, 1);
    this.configLoadedAt.set(Math.floor(atMs / 1000));
  }

  /** Records one answered call. Children are cached per rule, so the hot path builds no label strings. */
  observe(domainName: string, d: Decision, seconds: number): void {
    this.latencySeries.observe(seconds);
    this.requestChildren(d.domain ? domainName : UNKNOWN_DOMAIN)[d.streamEnd ? 2 : d.overLimit ? 1 : 0]!.inc();
    if (!d.domain) return;
    if (d.expired) this.budget.reservationsExpired.inc(d.expired);
    const source = SOURCES.indexOf(d.source);
    for (const o of d.descriptors) {
      const c = this.children(d.domain.name, o.rule);
      const result = o.over ? (o.shadow ? 2 : 1) : 0;
      const slot = result * SOURCES.length + source;
      let child = c.decisions[slot];
      if (!child) child = c.decisions[slot] = this.decisions.labels({ ...c.labels, result: RESULTS[result], source: d.source });
      child.inc();
      // A refund its rule does not take checks nothing (no windows), and is counted as ignored.
      if (o.refundIgnored) this.budget.observe(c.charges, c.labels, o);
      if (o.windows.length === 0) continue;
      // What is given back (a refund, slots returned) was asked for once already: not hits again.
      if (o.refunded === undefined && o.slots?.event !== 'returned') c.hits.inc(o.hits);
      if (o.charged !== undefined || o.reservation || o.refunded !== undefined || o.slots) this.budget.observe(c.charges, c.labels, o);
      for (const w of o.windows) {
        const window = w.limit.windowName;
        if (w.over) cachedSeries(c.over, window, () => this.overLimit.labels({ ...c.labels, window })).inc();
        else if (w.limit.requestsPerUnit - w.remaining >= this.nearRatio * w.limit.requestsPerUnit) {
          cachedSeries(c.near, window, () => this.nearLimit.labels({ ...c.labels, window })).inc();
        }
      }
    }
  }

  private children(domain: string, rule: Rule | undefined): RuleChildren {
    const cached = rule ? this.byRule.get(rule) : this.unmatched.get(domain);
    if (cached) return cached;
    const labels = { domain, rule: rule?.id ?? NONE, category: rule?.category ?? '' };
    const made: RuleChildren = { labels, hits: this.hits.labels(labels), decisions: [], near: new Map(), over: new Map(), charges: new Map() };
    if (rule) this.byRule.set(rule, made);
    else this.unmatched.set(domain, made);
    return made;
  }

  private requestChildren(domain: string): Child[] {
    let pair = this.requestsByDomain.get(domain);
    if (!pair) {
      pair = (['ok', 'over_limit', 'stream_end'] as const).map((result) => this.requests.labels({ domain, result }));
      this.requestsByDomain.set(domain, pair);
    }
    return pair;
  }
}
