import { performance } from 'node:perf_hooks';
import { Cluster, type Redis, ReplyError } from 'ioredis';
import type { Logger } from 'pino';
import { windowBounds } from '../counters/calendar.js';
import type { Clock } from '../counters/clock.js';
import { BUCKET_SUFFIX, hashTag, storeKey, windowCounterName } from '../counters/keys.js';
import { StoreDegradedError, type StoreUnavailableError } from '../errors.js';
import type { CheckResult, CounterCheck, CounterWindow } from '../limits/check.js';
import { acrossParts } from './across-parts.js';
import { BatchQueues, type BatchWindow } from './batch-queues.js';
import { ClusterRoutes, NODE, TAG } from './cluster-routes.js';
import { answerBatch, batchSpan, byHashTag, encodeBatch, encodeOnePlain, isOnePlain, type Pending } from './redis-batch.js';
import { createClient, type RedisConnection, redisFailure } from './redis-connection.js';
import { KeyRefusals } from './redis-refusals.js';
import { CHECK_SCRIPT, CLUSTER_CHECK_SCRIPT, evalCheckScript, evalOnePlain, evalOnNode, noScriptFlags, notLocal, ONE_PLAIN_SCRIPT } from './redis-script.js';
import { RedisSlotCensus } from './redis-slot-census.js';
import { RedisSlotLeases } from './redis-slot-leases.js';
import { RedisSpendTop } from './redis-spend-top.js';
import type { BatchTracer, Store, StoreHealth, TraceLink } from './store.js';
import { TimeoutError, withTimeout } from './timeout.js';
import { DEFAULT_USAGE_MAX_LEN } from './usage-ledger.js';
import { whileMoving } from './while-moving.js';

export interface RedisStoreOptions {
  connection: RedisConnection;
  /** Longest wait for one decision's round trip; past it the call fails (and the failure policy answers). */
  timeoutMs: number;
  /** Namespace of every key, so several services can share a Redis. */
  keyPrefix: string;
  logger: Logger;
  sentinelPassword?: string;
  /** Tests only: window time from this clock instead of Redis's TIME. */
  clock?: Clock;
  /** Traces each script call that carries a sampled decision (tracing/). */
  tracer?: BatchTracer;
  /** REDIS_PIPELINE_WINDOW and _LIMIT; unset, each event-loop turn's requests go at its end. */
  batch?: BatchWindow;
  /** USAGE_LEDGER_MAX_LEN: about how many events each ledger stream keeps (usage-ledger.ts). */
  usageMaxLen?: number;
}

/** Redis counts as not answering (the connection may look fine: a frozen or stuck server) after this many
 * timeouts in a row with no reply at all for SILENCE_TO_DEGRADE timeouts' time; calls then fail at once
 * instead of each waiting out the timeout. A burst of timeouts between replies is a hiccup, not an outage. */
const TIMEOUTS_TO_DEGRADE = 3;
const SILENCE_TO_DEGRADE = 4;
/** However busy this process (its timers late, which excuses Redis above), calls with no reply at all for this
 * long mean Redis is not answering: a busy process still reads what came before a call's verdict (withTimeout). */
const WAITING_TO_DEGRADE_MS = 1000;
const PROBE_INTERVAL_MS = 250;

/** Counters in Redis, shared by every replica, windows on Redis's clock. Decisions that arrive in the same
 * event-loop turn go to Redis as one script call (per Cluster master) that decides each of them in turn: under a
 * burst, Redis runs one script instead of hundreds and this process waits for one reply. */
export class RedisStore implements Store {
  readonly kind = 'redis';
  readonly client: Redis | Cluster;
  private degradedReason: string | undefined = 'connecting';
  private timeouts = 0;
  private lastReplyAt = performance.now();
  /** When the oldest call with no reply since was sent (undefined: none waits). */
  private waitingSince: number | undefined;
  private probe: NodeJS.Timeout | undefined;
  private closed = false;
  /** Requests waiting for their script call, by Cluster master or hash tag (batch-queues.ts, cluster-routes.ts). */
  private readonly queues: BatchQueues;
  /** The script loaded on every master (and, in Cluster, a connection to each), after each 'ready'. */
  private preloaded: Promise<void> = Promise.resolve();
  private readonly refusals: KeyRefusals;
  private readonly routes: ClusterRoutes | undefined;
  readonly slotLeases: RedisSlotLeases;
  readonly slotCensus: RedisSlotCensus;
  readonly spendTop: RedisSpendTop;

  constructor(private readonly opts: RedisStoreOptions) {
    this.refusals = new KeyRefusals(opts.logger);
    this.client = createClient(opts.connection, { commandTimeoutMs: opts.timeoutMs, sentinelPassword: opts.sentinelPassword });
    this.routes = this.client instanceof Cluster ? new ClusterRoutes(this.client, opts.keyPrefix) : undefined;
    this.slotLeases = new RedisSlotLeases(this.client, opts.keyPrefix, opts.clock);
    this.slotCensus = new RedisSlotCensus(this.client, opts.keyPrefix, opts.clock);
    this.spendTop = new RedisSpendTop(this.client, opts.keyPrefix, this.routes, opts.clock);
    // A Cluster master's share of a busy turn gathers for a few turns while small (batch-queues.ts, GATHER_BELOW).
    const gathers = this.routes ? (to: string): boolean => to.startsWith(NODE) : undefined;
    this.queues = new BatchQueues((batch, to, heldMs) => this.send(batch, to, heldMs), opts.batch, undefined, gathers);
    this.client.on('ready', () => {
      this.preloaded = this.preload();
      this.recovered();
    });
    this.client.on('close', () => this.degrade('connection closed'));
    // ioredis also emits 'error' for every failed reconnect; state changes are logged by degrade() once.
    this.client.on('error', (err: Error) => opts.logger.debug({ err: err.message }, 'redis client error'));
  }

  /** The namespace of its keys (REDIS_KEY_PREFIX). */
  get keyPrefix(): string {
    return this.opts.keyPrefix;
  }

  health(): StoreHealth {
    if (this.degradedReason === undefined && this.refusals.outOfMemory()) return { degraded: true, reason: 'redis out of memory: writes refused (maxmemory)' };
    return { degraded: this.degradedReason !== undefined, reason: this.degradedReason };
  }

  /** Resolves when Redis is ready and has the script, or after `ms` (the service starts either way; the
   * policy covers it). */
  async waitReady(ms: number): Promise<boolean> {
    const until = performance.now() + ms;
    if (this.degradedReason && !(await this.onceReady(ms))) return false;
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<void>((resolve) => (timer = setTimeout(resolve, Math.max(0, until - performance.now()))));
    await Promise.race([this.preloaded, late]);
    clearTimeout(timer);
    return true;
  }

  private onceReady(ms: number): Promise<boolean> {
    return new Promise((resolve) => {
      const done = (ok: boolean): void => {
        clearTimeout(timer);
        this.client.off('ready', onReady);
        resolve(ok);
      };
      const onReady = (): void => done(true);
      const timer = setTimeout(() => done(false), ms);
      this.client.on('ready', onReady);
    });
  }

  /** Loads the script on every master before the first decision needs it: a cold Cluster node would
   * otherwise cost the first requests a connection and a NOSCRIPT round trip, past their deadline. */
  private async preload(): Promise<void> {
    const nodes = this.client instanceof Cluster ? this.client.nodes('master') : [this.client];
    const load = (n: Redis, script: string): Promise<unknown> => withTimeout(n.script('LOAD', script), this.opts.timeoutMs * 40).catch(() => undefined);
    const scripts = this.routes ? [CHECK_SCRIPT, CLUSTER_CHECK_SCRIPT] : this.client instanceof Cluster ? [CHECK_SCRIPT] : [CHECK_SCRIPT, ONE_PLAIN_SCRIPT];
    await Promise.all(nodes.flatMap((n) => scripts.map((s) => load(n, s.text))));
  }

  check(checks: readonly CounterCheck[], trace?: TraceLink): Promise<CheckResult> {
    if (this.degradedReason) return Promise.reject(new StoreDegradedError(`redis unavailable: ${this.degradedReason}`));
    if (!this.routes) return this.enqueue('count', checks, '', trace);
    const nodes = this.routes.byNode(checks);
    if (!nodes) return this.bySlot('count', checks, trace);
    // On one master (every request of one client, and most with a second descriptor): one call, atomic.
    if (nodes.groups.length === 1) return this.enqueue('count', checks, nodes.queues[0]!, trace);
    return this.acrossParts('count', checks, nodes.groups, nodes.queues, trace);
  }

  /** A Cluster request slot by slot, through the client's redirects: while the map of slots is not known, and
   * for the requests a per-node call did not decide because it found a key not local (it wrote nothing for them). */
  private bySlot(mode: Pending['mode'], checks: readonly CounterCheck[], trace: TraceLink | undefined, urgent = false, atMs?: number): Promise<CheckResult> {
    const slots = byHashTag(checks);
    const queues = slots.map((idx) => TAG + hashTag(checks[idx[0]!]!.key));
    // Sent again while the Cluster fails over or moves the slot (while-moving.ts).
    const once = (): Promise<CheckResult> =>
      slots.length === 1 ? this.enqueue(mode, checks, queues[0]!, trace, urgent, atMs) : this.acrossParts(mode, checks, slots, queues, trace, urgent, atMs);
    return whileMoving(once, this.opts.timeoutMs, () => this.closed);
  }

  /** Queues a request for the next script call to `tag` (batch-queues.ts); `urgent`, past any batch window. */
  private readonly enqueue = (
    mode: Pending['mode'],
    checks: readonly CounterCheck[],
    tag: string,
    trace: TraceLink | undefined,
    urgent = false,
    atMs?: number,
  ): Promise<CheckResult> => new Promise((resolve, reject) => this.queues.add(tag, { mode, checks, trace, resolve, reject, atMs }, urgent));

  /** A request over several masters or slots (across-parts.ts). */
  private acrossParts(
    mode: Pending['mode'],
    checks: readonly CounterCheck[],
    parts: number[][],
    queues: string[],
    trace?: TraceLink,
    urgent = false,
    atMs?: number,
  ) {
    return acrossParts(this.enqueue, mode, checks, parts, queues, trace, urgent, atMs);
  }

  /** One script call for a batch. Its deadline runs from here, when the command is written, not from when
   * each request arrived: time this process spent reading a burst is not Redis's delay. Time the process
   * could not run extends it, up to twice the timeout in all (see withTimeout): with the defaults, 50 ms,
   * Envoy's filter timeout in the shipped envoy.yaml. What a batch window held them (`heldMs`) comes off it:
   * the window is this process's choice, and the budget is Envoy's. */
  private send(batch: Pending[], to: string, heldMs = 0): Promise<void> | undefined {
    const node = to.startsWith(NODE) ? this.routes!.connection(to) : undefined;
    if (to.startsWith(NODE) && !node) {
      this.reroute(batch);
      return undefined;
    }
    const nowMs = batch[0]!.atMs ?? this.opts.clock?.now() ?? 0; // a request with its own time goes alone
    const full = () => encodeBatch(batch, this.opts.keyPrefix, nowMs, this.spendTop.placement(to, this.opts.usageMaxLen ?? DEFAULT_USAGE_MAX_LEN));
    // A quiet replica's usual call, one plain request, runs the lean script on one Redis (not a Cluster's).
    const lean = !node && batch.length === 1 && !(this.client instanceof Cluster) && isOnePlain(batch[0]!);
    const { keys, args } = lean ? encodeOnePlain(batch[0]!, this.opts.keyPrefix, nowMs) : full();
    const span = this.opts.tracer && batchSpan(this.opts.tracer, batch, keys.length);
    const call = node ? evalOnNode(node, keys, args) : lean ? evalOnePlain(this.client as Redis, keys, args, full) : evalCheckScript(this.client, keys, args);
    const timeoutMs = Math.max(1, this.opts.timeoutMs - heldMs);
    return withTimeout(this.waiting(call), timeoutMs, this.opts.timeoutMs).then(
      (reply) => {
        this.replied();
        span?.end();
        try {
          const rest = answerBatch(batch, reply, this.refusals.refused);
          if (rest.length > 0) this.reroute(rest);
        } catch (err) {
          // A reply this process cannot read fails its requests (the policy answers them), never strands them.
          for (const p of batch) p.reject(redisFailure(err));
        }
      },
      (err: unknown) => {
        if (node && (notLocal(err) || noScriptFlags(err))) {
          this.replied();
          span?.end('moved');
          this.reroute(batch, noScriptFlags(err));
          return;
        }
        const failure = this.failed(err as Error);
        span?.end(failure.constructor.name);
        for (const p of batch) p.reject(failure);
      },
    );
  }

  /** Requests a per-node call left undecided, a key not its master's (a slot moved): the map of slots is read
   * again, each goes slot by slot; the call wrote nothing for them (redis-script.ts), so none counts twice. */
  private reroute(batch: Pending[], unsupported = false): void {
    this.routes!.refresh(unsupported);
    for (const p of batch) this.bySlot(p.mode, p.checks, p.trace, true, p.atMs).then(p.resolve, p.reject);
  }

  /** A command of another part (the RLQS share table) on this connection, under the store's health: refused at
   * once while Redis is degraded, as decisions are, so nothing queues up behind a Redis that does not answer;
   * its reply, or its running out of `timeoutMs`, counts toward that health as a decision's does, so a Redis
   * only RLQS calls is found frozen too. Failures come back as StoreUnavailableError. */
  call<T>(run: (client: Redis | Cluster) => Promise<T>, timeoutMs: number): Promise<T> {
    if (this.degradedReason) return Promise.reject(new StoreDegradedError(`redis unavailable: ${this.degradedReason}`));
    return withTimeout(this.waiting(run(this.client)), timeoutMs).then(
      (reply) => {
        this.replied();
        return reply;
      },
      (err: unknown) => {
        throw this.failed(err as Error);
      },
    );
  }

  async reset(windows: readonly CounterWindow[]): Promise<number> {
    if (windows.length === 0) return 0;
    try {
      // A client's keys share a hash tag, so this is one slot in Cluster mode.
      return await withTimeout(this.client.del(...windows.flatMap((w) => this.countersOf(w))), this.opts.timeoutMs * 4);
    } catch (err) {
      throw redisFailure(err);
    }
  }

  /** The counters a reset deletes: a bucket's one; a window's in the windows before, at and after this
   * process's now (Redis's clock decides, and may be a little apart), so the current and the previous
   * window are gone whichever side of a boundary either clock is. */
  private countersOf(w: CounterWindow): string[] {
    const key = storeKey(this.opts.keyPrefix, w.key);
    if (w.key.endsWith(BUCKET_SUFFIX)) return [key];
    const now = this.opts.clock?.now() ?? Date.now();
    if (w.calendar) {
      // A calendar window's index is not now / window_ms (counters/calendar.ts): the ones around now.
      const { index } = windowBounds(now, w.windowMs, w.calendar);
      return [-2, -1, 0, 1].map((d) => `${key}:${index + d}`);
    }
    return [-2, -1, 0, 1].map((d) => windowCounterName(key, w.windowMs, now + d * w.windowMs));
  }

  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.probe);
    // What waits for the batch window goes now, ahead of QUIT, which Redis answers after it.
    this.queues.flushNow();
    try {
      await this.client.quit();
    } catch {
      this.client.disconnect();
    }
  }

  private failed(err: Error): StoreUnavailableError {
    // A timer that fired late means this process was overloaded: the call fails, but Redis is not to blame.
    const redisSlow = err instanceof TimeoutError && err.lateMs < this.opts.timeoutMs;
    const now = performance.now();
    const silentMs = now - this.lastReplyAt;
    const unanswered = err instanceof TimeoutError && this.waitingSince !== undefined && now - this.waitingSince >= WAITING_TO_DEGRADE_MS;
    if ((redisSlow && ++this.timeouts >= TIMEOUTS_TO_DEGRADE && silentMs >= SILENCE_TO_DEGRADE * this.opts.timeoutMs) || unanswered) {
      this.degrade(`no answer within ${this.opts.timeoutMs} ms`);
      this.startProbe();
    }
    return redisFailure(err);
  }

  /** While Redis is connected but silent, ping it until it answers again: one ping at a time, so a Redis frozen
   * for days holds one waiting PING, not one per interval. */
  private startProbe(): void {
    if (this.probe || this.closed) return;
    let ping: Promise<unknown> | undefined;
    this.probe = setInterval(() => {
      if (ping) return;
      ping = this.client.ping().finally(() => (ping = undefined));
      withTimeout(ping, this.opts.timeoutMs * 4).then(
        () => this.recovered(),
        () => undefined,
      );
    }, PROBE_INTERVAL_MS);
    this.probe.unref();
  }

  private degrade(reason: string): void {
    if (this.closed || this.degradedReason) return;
    this.degradedReason = reason;
    this.opts.logger.warn({ reason }, 'redis store degraded');
  }

  /** A reply came in time: Redis answers. */
  private replied(): void {
    this.timeouts = 0;
    this.lastReplyAt = performance.now();
    this.waitingSince = undefined;
  }

  /** Marks a call as waiting for Redis until it gets any reply, late or not, or an error reply. */
  private waiting<T>(call: Promise<T>): Promise<T> {
    this.waitingSince ??= performance.now();
    const answered = (err?: unknown): void => {
      if (err === undefined || err instanceof ReplyError) this.waitingSince = undefined;
    };
    call.then(() => answered(), answered);
    return call;
  }

  private recovered(): void {
    clearInterval(this.probe);
    this.probe = undefined;
    this.replied();
    if (!this.degradedReason) return;
    const was = this.degradedReason;
    this.degradedReason = undefined;
    if (was !== 'connecting') this.opts.logger.info({ was }, 'redis store recovered');
    else this.opts.logger.debug('redis store connected');
  }
}
