import type { Cluster, Redis } from 'ioredis';
import type { Clock } from '../counters/clock.js';
import { censusKey, slotHolders, storeKey } from '../counters/keys.js';
import { nearestLimit } from './census-top.js';
import { CENSUS_DROP_SCRIPT, runScript, SLOT_CENSUS_SCRIPT, SLOT_NOTE_SCRIPT } from './redis-script.js';
import { type Census, type CensusCounter, MAX_CENSUS, MAX_LISTED, type SlotCensus } from './store.js';
import { withTimeout } from './timeout.js';
import { inWaves } from './waves.js';

/** Counters a census reads at once: each is a script call on its own counter's master. */
const CENSUS_WIDTH = 100;
/** A census is work in the background: it may wait this long for Redis, not the decisions' timeout. */
const CENSUS_TIMEOUT_MS = 5000;

/** The census in Redis (store.ts SlotCensus): a rule's counters are a hash, slots key -> '<limit>:<when listed>'
 * (slot-note.lua: at most MAX_LISTED, kept a while past the rule's longest hold); a census reads it (HSCAN, at
 * most MAX_CENSUS) and counts each counter with slot-census.lua on that counter's keys, so on a Cluster each call
 * goes to its counter's master. A counter that holds none leaves the hash (census-drop.lua: unless a take listed
 * it again meanwhile); its next take lists it again. */
export class RedisSlotCensus implements SlotCensus {
  constructor(
    private readonly client: Redis | Cluster,
    private readonly prefix: string,
    /** Tests only: Redis's TIME otherwise, as the decisions. */
    private readonly clock: Clock | undefined,
  ) {}

  async note(rule: string, key: string, limit: number, keepMs: number): Promise<void> {
    const args = [censusKey(this.prefix, rule), MAX_LISTED, keepMs, key, `${limit}:${this.clock?.now() ?? Date.now()}`];
    await withTimeout(runScript(this.client, SLOT_NOTE_SCRIPT, 1, args), CENSUS_TIMEOUT_MS);
  }

  async count(rule: string, top: number): Promise<Census> {
    const list = censusKey(this.prefix, rule);
    const listed = [...(await this.read(list))];
    const out: Census = { held: 0, expired: 0, counters: Math.min(listed.length, MAX_CENSUS), partial: listed.length > MAX_CENSUS, top: [] };
    const found: CensusCounter[] = [];
    const gone: string[] = [];
    await inWaves(listed.slice(0, out.counters), CENSUS_WIDTH, async ([key, value]) => {
      const [held, expired] = await this.countOne(key);
      out.expired += expired;
      out.held += held;
      if (held > 0) found.push({ key, held, limit: Number(value.split(':')[0]) });
      else gone.push(key, value);
    });
    if (gone.length > 0) await withTimeout(runScript(this.client, CENSUS_DROP_SCRIPT, 1, [list, ...gone]), CENSUS_TIMEOUT_MS);
    out.top = nearestLimit(found, top);
    return out;
  }

  /** The rule's listed counters (once each: HSCAN may return one twice), MAX_CENSUS and a little more at most. */
  private async read(list: string): Promise<Map<string, string>> {
    const out = new Map<string, string>();
    let cursor = '0';
    do {
      const [next, flat] = await withTimeout(this.client.hscan(list, cursor, 'COUNT', 1000), CENSUS_TIMEOUT_MS);
      for (let i = 0; i + 1 < flat.length; i += 2) out.set(flat[i]!, flat[i + 1]!);
      cursor = next;
    } while (cursor !== '0' && out.size <= MAX_CENSUS);
    return out;
  }

  private countOne(key: string): Promise<[number, number]> {
    const args = [storeKey(this.prefix, key), storeKey(this.prefix, slotHolders(key)), this.clock?.now() ?? 0];
    return withTimeout(runScript<[number, number]>(this.client, SLOT_CENSUS_SCRIPT, 2, args), CENSUS_TIMEOUT_MS);
  }
}
