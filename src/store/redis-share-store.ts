import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { Cluster, Redis } from 'ioredis';
import { MAX_INSTANCES_PER_BUCKET, type ShareGrant, type ShareRequest, type ShareStore } from './share-store.js';
import { withTimeout } from './timeout.js';

const SHARE_SCRIPT = readFileSync(new URL('./lua/quota-share.lua', import.meta.url), 'utf8');
const SHARE_SHA = createHash('sha1').update(SHARE_SCRIPT).digest('hex');

/** The share table in Redis, shared by every replica (quota-share.lua is the contract). One script call per
 * bucket of a report, all sent at once (ioredis writes them in one go; in Cluster each goes to its key's node),
 * so a report costs one round trip whatever its size. Reports come every few seconds per Envoy, not per request:
 * this is not on the decision path. */
export class RedisShareStore implements ShareStore {
  constructor(
    private readonly client: Redis | Cluster,
    private readonly keyOf: (key: string) => string,
    private readonly timeoutMs: number,
    private readonly maxInstances = MAX_INSTANCES_PER_BUCKET,
  ) {}

  /** `_nowMs` is not used: expiry is on Redis's clock, which every replica shares. */
  reserve(requests: readonly ShareRequest[], _nowMs?: number): Promise<ShareGrant[]> {
    return withTimeout(Promise.all(requests.map((r) => this.one(r))), this.timeoutMs);
  }

  private async one(r: ShareRequest): Promise<ShareGrant> {
    const demand = Number.isFinite(r.demand) ? String(Math.max(0, r.demand)) : '-1';
    const capacity = String(Math.min(Math.max(0, r.capacity), 1e15)); // finite: Lua reads "Infinity" as nothing
    const running = String(Math.min(Math.max(0, r.running), 1e15));
    const args = [this.keyOf(r.key), r.instance, demand, capacity, Math.max(1, Math.round(r.ttlMs)), this.maxInstances, running];
    let reply: string[];
    try {
      reply = (await this.client.evalsha(SHARE_SHA, 1, ...args)) as string[];
    } catch (err) {
      if (!(err as Error).message?.startsWith('NOSCRIPT')) throw err;
      reply = (await this.client.eval(SHARE_SCRIPT, 1, ...args)) as string[];
    }
    const previous = Number(reply[2]);
    return { rate: Number(reply[0]), held: Number(reply[3]), fair: Number(reply[1]), previous: previous < 0 ? undefined : previous };
  }
}
