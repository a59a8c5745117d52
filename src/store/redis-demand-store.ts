import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { Cluster, Redis } from 'ioredis';
import { type DemandEntry, type DemandReport, type DemandStore, decodeDemand, encodeDemand, MAX_INSTANCES_PER_BUCKET } from './demand-store.js';
import { withTimeout } from './timeout.js';

const DEMAND_SCRIPT = readFileSync(new URL('./lua/quota-demand.lua', import.meta.url), 'utf8');
const DEMAND_SHA = createHash('sha1').update(DEMAND_SCRIPT).digest('hex');

/** The demand table in Redis, shared by every replica (quota-demand.lua is the contract). One script call per
 * bucket of a report, all sent at once (ioredis writes them in one go; in Cluster each goes to its key's
 * node), so a report costs one round trip whatever its size. Reports come every few seconds per Envoy, not
 * per request: this is not on the decision path. */
export class RedisDemandStore implements DemandStore {
  constructor(
    private readonly client: Redis | Cluster,
    private readonly keyOf: (key: string) => string,
    private readonly timeoutMs: number,
  ) {}

  /** `_nowMs` is not used: expiry is on Redis's clock, which every replica shares. */
  async exchange(reports: readonly DemandReport[], _nowMs?: number): Promise<DemandEntry[][]> {
    const calls = reports.map((r) => this.one(r));
    return withTimeout(Promise.all(calls), this.timeoutMs);
  }

  private async one(r: DemandReport): Promise<DemandEntry[]> {
    const args = [this.keyOf(r.key), r.instance, encodeDemand(r.demand), Math.max(1, Math.round(r.ttlMs)), MAX_INSTANCES_PER_BUCKET];
    let flat: string[];
    try {
      flat = (await this.client.evalsha(DEMAND_SHA, 1, ...args)) as string[];
    } catch (err) {
      if (!(err as Error).message?.startsWith('NOSCRIPT')) throw err;
      flat = (await this.client.eval(DEMAND_SCRIPT, 1, ...args)) as string[];
    }
    const out: DemandEntry[] = [];
    for (let i = 0; i + 1 < flat.length; i += 2) out.push({ instance: flat[i]!, demand: decodeDemand(flat[i + 1]!) });
    return out;
  }
}
