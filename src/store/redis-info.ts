import type { Cluster, Redis } from 'ioredis';
import { withTimeout } from './timeout.js';

/** Redis's memory as Tollgate sees it (INFO memory and stats), summed over the masters of a Cluster. Counters that
 * Redis evicts are limits forgotten: a client over its limit starts again from zero. */
export interface RedisMemory {
  usedBytes: number;
  /** 0: no maxmemory (Redis grows until the machine refuses). */
  maxBytes: number;
  /** Keys evicted since the server started (evicted_keys). */
  evictedKeys: number;
}

const FIELDS = { used_memory: 'usedBytes', maxmemory: 'maxBytes', evicted_keys: 'evictedKeys' } as const;

/** The fields of INFO's `name:value` lines that RedisMemory holds; a field Redis did not send stays 0. */
export function parseInfo(text: string): RedisMemory {
  const out: RedisMemory = { usedBytes: 0, maxBytes: 0, evictedKeys: 0 };
  for (const line of text.split('\n')) {
    const colon = line.indexOf(':');
    const field = FIELDS[line.slice(0, colon) as keyof typeof FIELDS];
    if (colon > 0 && field) out[field] = Number(line.slice(colon + 1).trim()) || 0;
  }
  return out;
}

/** One INFO memory + stats per master, bounded by `timeoutMs`; rejects when any master does not answer, so a
 * partial sum is never reported as the whole. */
export async function readRedisMemory(client: Redis | Cluster, timeoutMs: number): Promise<RedisMemory> {
  const nodes: Redis[] = client.isCluster ? (client as Cluster).nodes('master') : [client as Redis];
  if (nodes.length === 0) throw new Error('no Redis master known yet');
  const parts = await withTimeout(Promise.all(nodes.map(async (n) => parseInfo(`${await n.info('memory')}\n${await n.info('stats')}`))), timeoutMs);
  return parts.reduce((a, b) => ({ usedBytes: a.usedBytes + b.usedBytes, maxBytes: a.maxBytes + b.maxBytes, evictedKeys: a.evictedKeys + b.evictedKeys }));
}
