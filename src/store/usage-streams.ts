import { Cluster, type Redis } from 'ioredis';
import { usageStreamKey } from '../counters/keys.js';
import type { UsageEvent, UsageOutcome } from './usage-ledger.js';

/** Streams found by one look, at most (over every master): a Cluster writes one per master's run of slots, and
 * one per slot a request was sent to through redirects (16,384 slots). */
const MAX_STREAMS = 20_000;

/** Entries a consumer group has read and acknowledged, everywhere, go: what keeps the ledger's memory at what
 * is waiting for export, not at USAGE_LEDGER_MAX_LEN per stream. Only entries every group has had and none
 * has pending (XTRIM MINID: ids below the threshold). */
const TRIM_EXPORTED = `
local least = nil
for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local pending, last = 0, nil
  for i = 1, #g, 2 do
    if g[i] == 'pending' then pending = g[i + 1] elseif g[i] == 'last-delivered-id' then last = g[i + 1] end
  end
  if pending > 0 or not last then return 0 end
  local ms, seq = string.match(last, '^(%d+)-(%d+)$')
  local n = { tonumber(ms), tonumber(seq) }
  if not least or n[1] < least[1] or (n[1] == least[1] and n[2] < least[2]) then least = n end
end
if not least then return 0 end
return redis.call('XTRIM', KEYS[1], 'MINID', string.format('%.0f-%.0f', least[1], least[2] + 1))`;

/** A stream entry as Redis answers it: its id and its fields, flat. */
type Entry = [id: string, fields: string[]];

/** The usage ledger's streams in Redis (usage-ledger.ts), read through a consumer group: what `tollgate usage
 * export` reads and acknowledges. On a Cluster, streams are found by name on every master (SCAN, TYPE stream). */
export class UsageStreams {
  constructor(
    private readonly client: Redis | Cluster,
    private readonly prefix: string,
  ) {}

  /** The name an event gives its stream: '' for one Redis's, the tag of a Cluster's (the text after the key's
   * own usage prefix, whatever braces REDIS_KEY_PREFIX holds). */
  nameOf(stream: string): string {
    const rest = stream.slice(usageStreamKey(this.prefix).length);
    return rest === '' ? '' : rest.slice(2, -1);
  }

  keyOf(name: string): string {
    return usageStreamKey(this.prefix, name);
  }

  /** Every ledger stream there is now. */
  async streams(): Promise<string[]> {
    const nodes = this.client instanceof Cluster ? this.client.nodes('master') : [this.client];
    const pattern = `${usageStreamKey(this.prefix)}*`;
    const found = new Set<string>();
    for (const node of nodes) {
      let cursor = '0';
      do {
        const [next, keys] = await node.scan(cursor, 'MATCH', pattern, 'COUNT', 1000, 'TYPE', 'stream');
        for (const k of keys) if (found.size < MAX_STREAMS) found.add(k);
        cursor = next;
      } while (cursor !== '0' && found.size < MAX_STREAMS);
    }
    return [...found].sort();
  }

  /** The group on a stream, made if missing, reading from its first entry. */
  async join(stream: string, group: string): Promise<void> {
    try {
      await this.client.xgroup('CREATE', stream, group, '0');
    } catch (err) {
      if (!String((err as Error).message).startsWith('BUSYGROUP')) throw err;
    }
  }

  /** This consumer's entries delivered and not acknowledged (`from`: past the id), oldest first; others'
   * idle past `idleMs` are claimed first (a consumer that died with them). `gone`: pending ids whose entries the
   * bound trimmed before they were acknowledged (nothing left to write). */
  async pending(
    stream: string,
    group: string,
    consumer: string,
    count: number,
    from = '0',
    idleMs = 60_000,
  ): Promise<{ events: UsageEvent[]; gone: string[] }> {
    const gone: string[] = [];
    if (from === '0') {
      // Redis 7 also drops from the list, and names, pending ids whose entries are gone (its reply's third part).
      const claimed = (await this.client.xautoclaim(stream, group, consumer, idleMs, '0', 'COUNT', count, 'JUSTID')) as unknown[];
      if (Array.isArray(claimed[2])) gone.push(...(claimed[2] as string[]));
    }
    const reply = (await this.client.xreadgroup('GROUP', group, consumer, 'COUNT', count, 'STREAMS', stream, from)) as [string, Entry[]][] | null;
    const events: UsageEvent[] = [];
    for (const e of reply?.[0]?.[1] ?? []) {
      if (Array.isArray(e[1])) events.push(this.eventOf(stream, e));
      else gone.push(e[0]);
    }
    return { events, gone };
  }

  /** Entries no consumer of the group has had, oldest first, at most `count` over all the streams; `blockMs` > 0
   * waits that long for some (one stream only). */
  async next(streams: readonly string[], group: string, consumer: string, count: number, blockMs: number): Promise<UsageEvent[]> {
    const block = blockMs > 0 && streams.length === 1 ? ['BLOCK', blockMs] : [];
    const out: UsageEvent[] = [];
    // One call per stream: a Cluster's streams are on several masters (an XREADGROUP may not span slots).
    for (const stream of streams) {
      if (out.length >= count) break;
      const args = ['GROUP', group, consumer, 'COUNT', count - out.length, ...block, 'STREAMS', stream, '>'];
      const reply = (await (this.client.xreadgroup as (...a: unknown[]) => Promise<unknown>)(...args)) as [string, Entry[]][] | null;
      for (const e of reply?.[0]?.[1] ?? []) out.push(this.eventOf(stream, e));
    }
    return out;
  }

  /** Drops what every group of the stream has read and acknowledged; returns how many entries went. */
  async trimExported(stream: string): Promise<number> {
    return (await this.client.eval(TRIM_EXPORTED, 1, stream)) as number;
  }

  private eventOf(stream: string, e: Entry): UsageEvent {
    return eventOf(this.nameOf(stream), e);
  }

  async ack(stream: string, group: string, ids: readonly string[]): Promise<void> {
    if (ids.length > 0) await this.client.xack(stream, group, ...ids);
  }

  /** Per group of each stream: entries it has not read yet, and entries trimmed before it read them. */
  async lag(streams: readonly string[]): Promise<Map<string, { waiting: number; dropped: number }>> {
    const out = new Map<string, { waiting: number; dropped: number }>();
    for (const stream of streams) {
      if ((await this.client.exists(stream)) === 0) continue; // no event written there yet
      const info = flatMap((await this.client.xinfo('STREAM', stream)) as unknown[]);
      const added = Number(info.get('entries-added') ?? 0);
      const trimmed = Math.max(0, added - Number(info.get('length') ?? 0));
      for (const g of (await this.client.xinfo('GROUPS', stream)) as unknown[][]) {
        const group = flatMap(g);
        const read = Number(group.get('entries-read') ?? 0);
        const sum = out.get(String(group.get('name'))) ?? { waiting: 0, dropped: 0 };
        sum.waiting += Math.max(0, added - Math.max(read, trimmed));
        sum.dropped += Math.max(0, trimmed - read);
        out.set(String(group.get('name')), sum);
      }
    }
    return out;
  }
}

function flatMap(flat: unknown[]): Map<string, unknown> {
  const m = new Map<string, unknown>();
  for (let i = 0; i + 1 < flat.length; i += 2) m.set(String(flat[i]), flat[i + 1]);
  return m;
}

/** A stream entry as an event, its stream by nameOf. */
function eventOf(name: string, [id, fields]: Entry): UsageEvent {
  const f = new Map<string, string>();
  for (let i = 0; i + 1 < fields.length; i += 2) f.set(fields[i]!, fields[i + 1]!);
  return {
    stream: name,
    id,
    t: Number(f.get('t')),
    domain: f.get('domain') ?? '',
    rule: f.get('rule') ?? '',
    window: f.get('window') ?? '',
    counter: f.get('counter') ?? '',
    // As written: lua/usage.lua writes only the outcomes UsageOutcome names.
    outcome: (f.get('outcome') ?? '') as UsageOutcome,
    tokens: Number(f.get('tokens')),
    estimate: Number(f.get('estimate')),
    rid: f.get('rid') ?? '',
    values: f.get('values') ?? '{}',
  };
}
