import calculateSlot from 'cluster-key-slot';
import type { Cluster, Redis } from 'ioredis';
import { hashTag, storeKey } from '../counters/keys.js';
import type { CounterCheck } from '../limits/check.js';

/** Queue keys of the Redis store's batches: a Cluster master's ('node:host:port'), or one hash tag's
 * ('tag:…', the fallback through the client's redirects). */
export const NODE = 'node:';
export const TAG = 'tag:';

/** Which master of a Cluster serves each check, from the client's map of slots (refreshed by ioredis on a
 * MOVED, and by the store when a per-node call finds a key not local), so a batch goes to each master as one
 * script call whatever slots its keys hash to. */
export class ClusterRoutes {
  private connections = new Map<string, Redis>();
  /** A master could not run the Cluster variant (Redis 6): every request goes slot by slot. */
  private off = false;
  private refreshedAt = 0;
  /** Per slot, the first slot of the run its master serves, as last found (spendTag). */
  private readonly runStarts = new Map<number, number>();

  constructor(
    private readonly cluster: Cluster,
    private readonly keyPrefix: string,
  ) {}

  /** The checks' indexes by master (queue keys NODE + host:port), or undefined when a slot's master is not
   * known yet (the client is still reading the map): the caller then goes slot by slot. */
  byNode(checks: readonly CounterCheck[]): { queues: string[]; groups: number[][] } | undefined {
    if (this.off) return undefined;
    const at = new Map<string, number[]>();
    let lastTag: string | undefined;
    let lastNode = '';
    for (let i = 0; i < checks.length; i++) {
      const tag = hashTag(checks[i]!.key);
      if (tag !== lastTag) {
        // The slot of the stored key (prefix included): a tag-less prefix leaves the tag in charge.
        const master = this.cluster.slots[calculateSlot(storeKey(this.keyPrefix, checks[i]!.key))]?.[0];
        if (master === undefined) return undefined;
        lastTag = tag;
        lastNode = master;
      }
      const list = at.get(lastNode);
      if (list) list.push(i);
      else at.set(lastNode, [i]);
    }
    return { queues: [...at.keys()].map((n) => NODE + n), groups: [...at.values()] };
  }

  /** The hash tag of the spend list a check's counter is listed in on its master (spend-top.ts): the tag of the
   * first slot of the run of slots that master serves around the counter's, so a master keeps one list per rule
   * window and run (one, unless slots were moved), read by spendTags. Undefined while the slot's master is not
   * known. */
  spendTag(c: CounterCheck): string | undefined {
    const slot = calculateSlot(storeKey(this.keyPrefix, c.key));
    const master = this.cluster.slots[slot]?.[0];
    if (master === undefined) return undefined;
    const slots = this.cluster.slots;
    // The run's start as last found, if the map still says so (it changes in place when the client reads it).
    let start = this.runStarts.get(slot);
    if (start === undefined || slots[start]?.[0] !== master || (start > 0 && slots[start - 1]?.[0] === master)) {
      start = slot;
      while (start > 0 && slots[start - 1]?.[0] === master) start--;
      this.runStarts.set(slot, start);
    }
    return tagOfSlot(start);
  }

  /** The hash tag of the counter's own slot: where a call through redirects (one slot) writes its ledger events. */
  slotTag(c: CounterCheck): string {
    return tagOfSlot(calculateSlot(storeKey(this.keyPrefix, c.key)));
  }

  /** The tags of every spend list the map of slots places: one per run of slots a master serves. */
  spendTags(): string[] {
    const tags: string[] = [];
    for (let s = 0; s < SLOTS; s++) {
      const master = this.cluster.slots[s]?.[0];
      if (master !== undefined && (s === 0 || this.cluster.slots[s - 1]?.[0] !== master)) tags.push(tagOfSlot(s));
    }
    return tags;
  }

  /** The connection to the master a NODE queue names; undefined if the client has none (it left the map). */
  connection(queue: string): Redis | undefined {
    const key = queue.slice(NODE.length);
    const known = this.connections.get(key);
    if (known?.status === 'ready') return known;
    this.connections = new Map(this.cluster.nodes('master').map((n) => [`${n.options.host}:${n.options.port}`, n]));
    const now = this.connections.get(key);
    return now?.status === 'ready' ? now : undefined; // connecting, closed or gone: the caller goes slot by slot
  }

  /** Reads the map of slots again (after a key was found not local): later batches go where the slots are now.
   * `unsupported`: the master could not run the script at all, so no batch goes per master again. */
  refresh(unsupported = false): void {
    if (unsupported) this.off = true;
    // At most once a second: during a slot's migration every batch to its master comes back, and the map does
    // not change until the migration ends.
    const now = Date.now();
    if (now - this.refreshedAt < 1000) return;
    this.refreshedAt = now;
    this.cluster.refreshSlotsCache();
  }
}

const SLOTS = 16384;
const slotTags = new Map<number, string>();

/** A short hash tag whose slot is `slot`: the first base-36 number that hashes there (a few thousand tries,
 * once per slot this process needs). */
function tagOfSlot(slot: number): string {
  let tag = slotTags.get(slot);
  if (tag !== undefined) return tag;
  for (let n = 0; ; n++) {
    tag = n.toString(36);
    if (calculateSlot(tag) === slot) break;
  }
  slotTags.set(slot, tag);
  return tag;
}
