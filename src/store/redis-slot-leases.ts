import type { Cluster, Redis } from 'ioredis';
import type { Clock } from '../counters/clock.js';
import { peerSlotsKey, slotHolders, storeKey } from '../counters/keys.js';
import { CENSUS_DROP_SCRIPT, runScript, SLOT_NOTE_SCRIPT, SLOT_RENEW_SCRIPT } from './redis-script.js';
import { type HeldSlot, MAX_PEER_SLOTS, type Renewal, type SlotLeases } from './store.js';
import { withTimeout } from './timeout.js';
import { inWaves } from './waves.js';

/** Holders one renewal script call renews, at most: a few ms of Redis's time, whatever a list holds. */
const RENEW_CHUNK = 200;
/** Script calls one renewal runs at once, at most. */
const RENEW_WIDTH = 100;
/** A renewal is work in the background: it may wait this long for Redis, not the decisions' timeout. */
const RENEW_TIMEOUT_MS = 2000;

/** A list's entry, with its field in the hash. */
type Listed = HeldSlot & { field: string };

/** Renewed slots in Redis (store.ts SlotLeases): a peer's list is a hash (slot-note.lua) that lives as long as
 * its latest entry may be renewed; a renewal reads it (HGETALL, at most MAX_PEER_SLOTS entries) and renews each
 * counter's holders with slot-renew.lua on that counter's keys, so on a Cluster each call goes to the master
 * of its counter, and a list and its slots may sit on different masters. */
export class RedisSlotLeases implements SlotLeases {
  constructor(
    private readonly client: Redis | Cluster,
    private readonly prefix: string,
    /** Tests only: Redis's TIME otherwise, as the decisions. */
    private readonly clock: Clock | undefined,
  ) {}

  async note(peer: string, held: readonly HeldSlot[]): Promise<number> {
    if (held.length === 0) return 0;
    const now = this.clock?.now() ?? Date.now();
    const ttl = Math.max(...held.map((h) => h.endMs + h.leaseMs - now));
    const pairs = held.flatMap((h) => [`${h.key}\n${h.id}`, `${h.leaseMs}:${h.endMs}`]);
    const args = [peerSlotsKey(this.prefix, peer), MAX_PEER_SLOTS, Math.max(1000, ttl), ...pairs];
    return withTimeout(runScript<number>(this.client, SLOT_NOTE_SCRIPT, 1, args), RENEW_TIMEOUT_MS);
  }

  async renew(peer: string): Promise<Renewal> {
    const list = peerSlotsKey(this.prefix, peer);
    const byKey = new Map<string, Listed[]>();
    for (const h of await this.read(list)) {
      const group = byKey.get(h.key);
      if (group) group.push(h);
      else byKey.set(h.key, [h]);
    }
    const parts: Listed[][] = [];
    for (const group of byKey.values()) for (let i = 0; i < group.length; i += RENEW_CHUNK) parts.push(group.slice(i, i + RENEW_CHUNK));
    const gone: string[] = [];
    let renewed = 0;
    await inWaves(parts, RENEW_WIDTH, async (part) => {
      const kept = await this.renewPart(part[0]!.key, part);
      for (let j = 0; j < part.length; j++) {
        if (kept[j] === 1) renewed++;
        else gone.push(part[j]!.field, `${part[j]!.leaseMs}:${part[j]!.endMs}`);
      }
    });
    // Dropped only as read: a slot the same id took again meanwhile (listed anew, with its own end) stays.
    if (gone.length > 0) await withTimeout(runScript(this.client, CENSUS_DROP_SCRIPT, 1, [list, ...gone]), RENEW_TIMEOUT_MS);
    return { renewed, dropped: gone.length / 2 };
  }

  async move(from: string, to: string): Promise<number> {
    const source = peerSlotsKey(this.prefix, from);
    const left = await this.note(to, await this.read(source));
    await withTimeout(this.client.del(source), RENEW_TIMEOUT_MS);
    return left;
  }

  /** A peer's list as slot-note.lua wrote it. */
  private async read(list: string): Promise<Listed[]> {
    const entries = await withTimeout(this.client.hgetall(list), RENEW_TIMEOUT_MS);
    return Object.entries(entries).map(([field, value]) => {
      const cut = field.lastIndexOf('\n');
      const [leaseMs, endMs] = value.split(':').map(Number) as [number, number];
      return { field, key: field.slice(0, cut), id: field.slice(cut + 1), leaseMs, endMs };
    });
  }

  private renewPart(key: string, part: Listed[]): Promise<number[]> {
    const set = storeKey(this.prefix, key);
    const args = [set, storeKey(this.prefix, slotHolders(key)), this.clock?.now() ?? 0, ...part.flatMap((h) => [h.id, h.leaseMs, h.endMs])];
    return withTimeout(runScript<number[]>(this.client, SLOT_RENEW_SCRIPT, 2, args), RENEW_TIMEOUT_MS);
  }
}
