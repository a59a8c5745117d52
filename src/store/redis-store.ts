import { Cluster, type Redis } from 'ioredis';
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import type { Logger } from 'pino';
import { StoreUnavailableError } from '../errors.js';
import type { Clock } from '../limiter/clock.js';
import { createClient, type RedisConnection } from './redis-connection.js';
import type { CheckResult, CounterCheck, CounterWindow, Store, StoreHealth } from './store.js';
import { TimeoutError, withTimeout } from './timeout.js';

const CHECK_SCRIPT = readFileSync(new URL('./lua/check-and-incr.lua', import.meta.url), 'utf8');

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
}

type CheckCommand = (...keysThenArgs: (string | number)[]) => Promise<number[]>;

/** Redis counts as not answering (the connection may look fine: a frozen or stuck server) after this many
 * timeouts in a row with no reply at all for SILENCE_TO_DEGRADE timeouts' time; calls then fail at once
 * instead of each waiting out the timeout. A burst of timeouts between replies is a hiccup, not an outage. */
const TIMEOUTS_TO_DEGRADE = 3;
const SILENCE_TO_DEGRADE = 4;
const PROBE_INTERVAL_MS = 250;

/** Counters in Redis, shared by every replica: one Lua call per decision, windows on Redis's clock. */
export class RedisStore implements Store {
  readonly kind = 'redis';
  readonly client: Redis | Cluster;
  private degradedReason: string | undefined = 'connecting';
  private timeouts = 0;
  private lastReplyAt = performance.now();
  private probe: NodeJS.Timeout | undefined;
  private closed = false;
  /** The script's command per key count, defined on first use. */
  private readonly commands: (CheckCommand | undefined)[] = [];

  constructor(private readonly opts: RedisStoreOptions) {
    this.client = createClient(opts.connection, { commandTimeoutMs: opts.timeoutMs, sentinelPassword: opts.sentinelPassword });
    this.client.on('ready', () => this.recovered());
    this.client.on('close', () => this.degrade('connection closed'));
    // ioredis also emits 'error' for every failed reconnect; state changes are logged by degrade() once.
    this.client.on('error', (err: Error) => opts.logger.debug({ err: err.message }, 'redis client error'));
  }

  health(): StoreHealth {
    return { degraded: this.degradedReason !== undefined, reason: this.degradedReason };
  }

  /** Resolves when Redis is ready, or after `ms` (the service starts either way; the policy covers it). */
  waitReady(ms: number): Promise<boolean> {
    if (!this.degradedReason) return Promise.resolve(true);
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

  async check(checks: readonly CounterCheck[]): Promise<CheckResult> {
    if (this.degradedReason) throw new StoreUnavailableError(`redis unavailable: ${this.degradedReason}`);
    const slots = this.client instanceof Cluster ? bySlotTag(checks) : undefined;
    if (!slots || slots.length === 1) return this.run('count', checks);
    return this.acrossSlots(checks, slots);
  }

  /** A request whose descriptors belong to different clients has counters in different Cluster slots, which
   * one script call cannot reach. Every slot is first asked without writing ('peek'); only when the request
   * fits everywhere is each slot counted, atomically within the slot. A request that loses a race between
   * the two phases can be counted in one slot yet rejected by another: the one inexactness, and only for
   * such requests. */
  private async acrossSlots(checks: readonly CounterCheck[], slots: number[][]): Promise<CheckResult> {
    const part = (mode: 'peek' | 'count') => Promise.all(slots.map((idx) => this.run(mode, idx.map((i) => checks[i]!))));
    const peeked = merge(checks.length, slots, await part('peek'));
    if (!peeked.admitted) return peeked;
    return merge(checks.length, slots, await part('count'));
  }

  /** One command per key count (the script is the same): with the count fixed, the first argument is a key,
   * which is what ioredis groups auto-pipelined commands by in Cluster mode. With a leading key count, it
   * would batch commands for different nodes together and Redis would refuse the batch. */
  private command(keys: number): CheckCommand {
    let command = this.commands[keys];
    if (!command) {
      const name = `tollgateCheck${keys}`;
      this.client.defineCommand(name, { lua: CHECK_SCRIPT, numberOfKeys: keys });
      const client = this.client as unknown as Record<string, CheckCommand>;
      command = this.commands[keys] = client[name]!.bind(this.client);
    }
    return command;
  }

  private async run(mode: 'peek' | 'count', checks: readonly CounterCheck[]): Promise<CheckResult> {
    const args: (string | number)[] = [];
    for (const c of checks) args.push(this.opts.keyPrefix + c.key);
    args.push(mode, this.opts.clock ? this.opts.clock.now() : 0);
    for (const c of checks) args.push(c.windowMs, c.limit, c.hits, c.sliding ? 1 : 0, c.group, c.shadow ? 1 : 0);
    let reply: number[];
    try {
      reply = await withTimeout(this.command(checks.length)(...args), this.opts.timeoutMs);
    } catch (err) {
      throw this.failed(err as Error);
    }
    this.timeouts = 0;
    this.lastReplyAt = performance.now();
    return parseReply(reply, checks.length);
  }

  async reset(windows: readonly CounterWindow[]): Promise<number> {
    if (windows.length === 0) return 0;
    try {
      // One hash per window series; a client's keys share a hash tag, so this is one slot in Cluster mode.
      return await withTimeout(this.client.del(...windows.map((w) => this.opts.keyPrefix + w.key)), this.opts.timeoutMs * 4);
    } catch (err) {
      throw new StoreUnavailableError(`redis: ${(err as Error).message}`, { cause: err });
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.probe);
    try {
      await this.client.quit();
    } catch {
      this.client.disconnect();
    }
  }

  private failed(err: Error): StoreUnavailableError {
    // A timer that fired late means this process was overloaded: the call fails, but Redis is not to blame.
    const redisSlow = err instanceof TimeoutError && err.lateMs < this.opts.timeoutMs;
    const silentMs = performance.now() - this.lastReplyAt;
    if (redisSlow && ++this.timeouts >= TIMEOUTS_TO_DEGRADE && silentMs >= SILENCE_TO_DEGRADE * this.opts.timeoutMs) {
      this.degrade(`no answer within ${this.opts.timeoutMs} ms`);
      this.startProbe();
    }
    return new StoreUnavailableError(`redis: ${err.message}`, { cause: err });
  }

  /** While Redis is connected but silent, ping it until it answers again. */
  private startProbe(): void {
    if (this.probe || this.closed) return;
    this.probe = setInterval(() => {
      withTimeout(this.client.ping(), this.opts.timeoutMs * 4).then(
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

  private recovered(): void {
    clearInterval(this.probe);
    this.probe = undefined;
    this.timeouts = 0;
    this.lastReplyAt = performance.now();
    if (!this.degradedReason) return;
    const was = this.degradedReason;
    this.degradedReason = undefined;
    this.opts.logger.info({ was }, 'redis store recovered');
  }
}

/** Indexes of the checks by Redis Cluster hash tag (the text inside the key's first {…}); all windows of
 * a descriptor share one. */
function bySlotTag(checks: readonly CounterCheck[]): number[][] {
  const byTag = new Map<string, number[]>();
  checks.forEach((c, i) => {
    const open = c.key.indexOf('{');
    const tag = c.key.slice(open + 1, c.key.indexOf('}', open + 1));
    const list = byTag.get(tag);
    if (list) list.push(i);
    else byTag.set(tag, [i]);
  });
  return [...byTag.values()];
}

/** The answers of several slots as one: admitted only if every slot admitted. */
function merge(n: number, slots: number[][], parts: CheckResult[]): CheckResult {
  const out: CheckResult = { nowMs: parts[0]!.nowMs, admitted: parts.every((p) => p.admitted), curr: new Array(n), prev: new Array(n), over: new Array(n) };
  slots.forEach((idx, s) => {
    idx.forEach((i, j) => {
      out.curr[i] = parts[s]!.curr[j]!;
      out.prev[i] = parts[s]!.prev[j]!;
      out.over[i] = parts[s]!.over[j]!;
    });
  });
  return out;
}

function parseReply(reply: number[], n: number): CheckResult {
  const curr = new Array<number>(n);
  const prev = new Array<number>(n);
  const over = new Array<boolean>(n);
  for (let i = 0; i < n; i++) {
    curr[i] = reply[2 + i * 3]!;
    prev[i] = reply[3 + i * 3]!;
    over[i] = reply[4 + i * 3] === 1;
  }
  return { nowMs: reply[0]!, admitted: reply[1] === 1, curr, prev, over };
}
