import { readFileSync } from 'node:fs';
import { Cluster, type Redis } from 'ioredis';
import { hashTag } from '../../counters/keys.js';
import { StoreDegradedError, StoreKeyError, StoreUnavailableError } from '../../errors.js';
import { runScript, scriptOf } from '../../store/redis-script.js';
import type { StoreHealth } from '../../store/store.js';
import { MAX_INSTANCES_PER_BUCKET, type SeenTable, SeenTables, type ShareOutcome, type ShareRequest, type ShareStore } from './share-store.js';

const SHARE_SCRIPT = scriptOf(readFileSync(new URL('./quota-share.lua', import.meta.url), 'utf8'));

/** How the share table reaches Redis: the counter store's connection, under its health (RedisStore.call), so a
 * Redis that does not answer is not called, as RLS decisions do not call it. */
export interface RedisCalls {
  readonly client: Redis | Cluster;
  call<T>(run: (client: Redis | Cluster) => Promise<T>, timeoutMs: number): Promise<T>;
  health(): StoreHealth;
}

/** Buckets sent to Redis whose call has not come back (answered, or failed with its connection): past it, a
 * report's buckets are refused at once (one report larger than this still goes when nothing else waits). A
 * call that outlived its timeout still waits in ioredis until Redis answers or the connection ends, so this,
 * not the timeout, bounds what a slow or frozen Redis holds here: about 1 KB a bucket (measured), 30 MB in
 * all. Far above what a replica has waiting in a round trip (20,000 buckets a second answered in a few ms). */
export const MAX_BUCKETS_IN_FLIGHT = 30_000;
/** Buckets in one script call. A bucket reads three fields of its table (its whole table only at the periodic
 * re-plan, once per fifth of a report interval), so a call's work does not grow with the fleet: a report costs
 * one call per this many buckets (per hash tag in Cluster) whatever the number of instances. Redis runs one script
 * at a time; this bounds how long an RLS decision waits behind one. */
const MAX_BUCKETS_PER_CALL = 32;

/** The share table in Redis, shared by every replica (quota-share.lua is the contract). A report's buckets go in
 * a few script calls, all sent at once (in Cluster, one per hash tag: a call's keys must share a slot), so a
 * report costs one round trip whatever its size. Reports come every few seconds per Envoy, not per request: this
 * is not on the decision path. */
export class RedisShareStore implements ShareStore {
  private readonly seen = new SeenTables();
  private inFlight = 0;

  constructor(
    private readonly redis: RedisCalls,
    private readonly keyOf: (key: string) => string,
    private readonly timeoutMs: number,
    private readonly maxInstances = MAX_INSTANCES_PER_BUCKET,
  ) {}

  unavailable(): StoreUnavailableError | undefined {
    const { degraded, reason } = this.redis.health();
    if (degraded) return new StoreDegradedError(`redis unavailable: ${reason}`);
    if (this.inFlight >= MAX_BUCKETS_IN_FLIGHT) return this.busy();
    return undefined;
  }

  private busy(): StoreUnavailableError {
    return new StoreUnavailableError(`redis: ${this.inFlight} rlqs buckets wait for an answer, the most that may`);
  }

  /** `_nowMs` is not used: expiry is on Redis's clock, which every replica shares. */
  async reserve(requests: readonly ShareRequest[], _nowMs?: number): Promise<ShareOutcome[]> {
    if (this.inFlight > 0 && this.inFlight + requests.length > MAX_BUCKETS_IN_FLIGHT) {
      const busy = this.busy();
      return requests.map(() => busy);
    }
    const out: ShareOutcome[] = new Array(requests.length);
    await Promise.all(this.calls(requests).map((idx) => this.send(requests, idx, out)));
    return out;
  }

  /** The requests' indexes, grouped into script calls: by Cluster slot (hash tag), then by MAX_BUCKETS_PER_CALL. */
  private calls(requests: readonly ShareRequest[]): number[][] {
    const groups = new Map<string, number[]>();
    const cluster = this.redis.client instanceof Cluster;
    requests.forEach((r, i) => {
      const tag = cluster ? hashTag(r.key) : '';
      const g = groups.get(tag);
      if (g) g.push(i);
      else groups.set(tag, [i]);
    });
    const calls: number[][] = [];
    for (const group of groups.values()) for (let at = 0; at < group.length; at += MAX_BUCKETS_PER_CALL) calls.push(group.slice(at, at + MAX_BUCKETS_PER_CALL));
    return calls;
  }

  /** One script call for the requests at `idx`; fills their outcomes. */
  private async send(requests: readonly ShareRequest[], idx: readonly number[], out: ShareOutcome[]): Promise<void> {
    const keys: string[] = [];
    const args: (string | number)[] = [this.maxInstances];
    for (const i of idx) {
      const r = requests[i]!;
      const seen = this.seen.get(r.key);
      keys.push(this.keyOf(r.key));
      args.push(r.instance, Number.isFinite(r.demand) ? String(Math.max(0, r.demand)) : '-1', finite(r.capacity), Math.max(1, Math.round(r.ttlMs)));
      args.push(finite(r.running), seen?.born ?? 0, seen?.endMs ?? 0, Math.max(0, Math.round(r.rebuildMs)), Math.max(1, Math.round(r.intervalMs)));
    }
    let reply: string[];
    try {
      reply = await this.redis.call(
        (client) => this.tracked(idx.length, runScript<string[]>(client, SHARE_SCRIPT, keys.length, [...keys, ...args])),
        this.timeoutMs,
      );
    } catch (err) {
      const failure = err instanceof StoreUnavailableError ? err : new StoreUnavailableError(`redis: ${(err as Error).message}`, { cause: err });
      for (const i of idx) out[i] = failure;
      return;
    }
    idx.forEach((i, k) => {
      out[i] = this.outcome(requests[i]!.key, reply.slice(k * 7, k * 7 + 7));
    });
  }

  /** Counts `n` buckets in flight until ioredis settles the call (not until its timeout: see MAX_BUCKETS_IN_FLIGHT). */
  private tracked<T>(n: number, call: Promise<T>): Promise<T> {
    this.inFlight += n;
    const done = (): void => {
      this.inFlight -= n;
    };
    call.then(done, done);
    return call;
  }

  private outcome(key: string, v: string[]): ShareOutcome {
    const rate = Number(v[0]);
    if (v[0] === '' || Number.isNaN(rate)) return new StoreKeyError(/^[A-Z]{2,16}$/.test(v[0] ?? '') ? v[0]! : 'ERR');
    const seen: SeenTable = { born: Number(v[4]), endMs: Number(v[5]) };
    this.seen.set(key, seen);
    const previous = Number(v[2]);
    return { rate, held: Number(v[3]), fair: Number(v[1]), previous: previous < 0 ? undefined : previous, tell: v[6] === '1' };
  }
}

/** A rate as Lua reads it: finite ("Infinity" reads as nothing), not negative. */
function finite(x: number): string {
  return String(Math.min(Math.max(0, x), 1e15));
}
