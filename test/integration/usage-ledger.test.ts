import { describe, expect, it } from 'vitest';
import { compileSources } from '../../src/config/load.js';
import { ManualClock } from '../../src/counters/clock.js';
import { fingerprint } from '../../src/fingerprint.js';
import { Limiter } from '../../src/limiter/limiter.js';
import type { DecisionInput } from '../../src/limiter/plan.js';
import type { MemoryStore } from '../../src/store/memory-store.js';
import type { RedisStore } from '../../src/store/redis-store.js';
import type { Store } from '../../src/store/store.js';
import type { UsageEvent } from '../../src/store/usage-ledger.js';
import { UsageStreams } from '../../src/store/usage-streams.js';
import { everyStore } from '../helpers/stores.js';

// The usage ledger (issue 62, item 2): a rule with `usage` appends one event per settlement, unreserved
// settlement, plain charge, refund and expired reservation, in the store step that counts it, so the events'
// tokens add up to what the counter was charged; a replayed settlement adds none. Memory, one Redis and a
// 3-master Cluster (its events on each counter's master). The service-level run (two replicas, a frozen Redis,
// an exporter killed mid-way) is usage-export.test.ts.

const CONFIG = `domain: llm
descriptors:
  - key: tenant
    descriptors:
      - key: model
        charge_mode: true
        reservation_key: request_id
        settlement_key: settle_id
        reservation_ttl: 1m
        usage: {values: [tenant, model]}
        rate_limit: {unit: day, requests_per_unit: 1000000}
`;
const T0 = 1_800_000_000_000;
const entries = (tenant: string, extra?: [string, string]) => [
  { key: 'tenant', value: tenant },
  { key: 'model', value: 'gpt-4o' },
  ...(extra ? [{ key: extra[0], value: extra[1] }] : []),
];
const call = (tenant: string, hits: number, extra?: [string, string], refund = false): DecisionInput => ({
  domain: 'llm',
  hits,
  descriptors: [{ entries: entries(tenant, extra), hits, ...(refund && { refund: true }) }],
});

/** Every event the store's ledger holds, oldest first. */
async function eventsOf(store: Store): Promise<UsageEvent[]> {
  if (store.kind === 'memory') return (store as MemoryStore).usage.read(0, 1000).events;
  const r = store as RedisStore;
  const streams = new UsageStreams(r.client, r.keyPrefix);
  const out: UsageEvent[] = [];
  for (const s of await streams.streams()) {
    await streams.join(s, 'test');
    out.push(...(await streams.next([s], 'test', 'me', 1000, 0)));
  }
  return out.sort((a, b) => a.t - b.t || (a.id < b.id ? -1 : 1));
}

describe('the usage ledger, on every store', () => {
  const { stores } = everyStore({ cluster: true });
  const config = compileSources([{ file: 'llm.yaml', text: CONFIG }]);

  it.each(stores)('%s: one event per charge, settled once, expired at its estimate; they add up to the counter', async (_name, make) => {
    const clock = new ManualClock(T0);
    const store = await make(clock);
    const limiter = new Limiter({ config: () => config, store, clock, tiers: { tierOf: () => undefined } });
    await limiter.decide(call('acme', 100, ['request_id', 'a'])); // reserved: no event yet
    await limiter.decide(call('acme', 120, ['settle_id', 'a'])); // settled: +120
    await limiter.decide(call('acme', 120, ['settle_id', 'a'])); // replayed: nothing
    await limiter.decide(call('acme', 50, ['settle_id', 'b'])); // no reservation: +50, once
    await limiter.decide(call('acme', 50, ['settle_id', 'b']));
    await limiter.decide(call('acme', 30)); // a plain charge: +30
    await limiter.decide(call('acme', 10, undefined, true)); // a refund: -10
    await limiter.decide(call('acme', 70, ['request_id', 'c']));
    clock.advance(61_000); // c's reservation ends unsettled, charged at its estimate when the counter is next used
    await limiter.decide(call('acme', 5, ['request_id', 'd'])); // d: reserved, open
    await limiter.decide(call('acme', 90, ['settle_id', 'c'])); // late: adds what it differs from the estimate
    await limiter.decide(call('Acme Corp', 7)); // a value that is not plain text: its fingerprint
    const events = await eventsOf(store);
    const acme = events.filter((e) => e.values.includes('"acme"'));
    expect(acme.map((e) => [e.outcome, e.tokens, e.estimate, e.rid])).toEqual([
      ['settled', 120, 100, fingerprint('a')],
      ['unreserved', 50, 0, fingerprint('b')],
      ['charged', 30, 0, ''],
      ['refunded', -10, 0, ''],
      ['expired', 70, 70, fingerprint('c')],
      ['settled', 20, 70, fingerprint('c')],
    ]);
    expect(acme.every((e) => e.values === '{"tenant":"acme","model":"gpt-4o"}' && e.domain === 'llm' && e.rule === 'tenant.model')).toBe(true);
    expect(acme.every((e) => e.window === 'day' && e.counter === `${fingerprint('acme')}.${fingerprint('gpt-4o')}`)).toBe(true);
    // The events add up to what the counter holds, but the open reservation's estimate.
    const check = await limiter.decide(call('acme', 0));
    const used = 1_000_000 - check.descriptors[0]!.windows[0]!.remaining;
    expect(acme.reduce((n, e) => n + e.tokens, 0)).toBe(used - 5);
    const other = events.filter((e) => !e.values.includes('"acme"'));
    expect(other.map((e) => e.values)).toEqual([`{"tenant":"fp:${fingerprint('Acme Corp')}","model":"gpt-4o"}`]);
    expect(JSON.stringify(events)).not.toContain('Acme Corp');
  });

  it.each(stores)('%s: a refund is what its windows gave back, the most of them, after a window turned', async (_name, make) => {
    const two = compileSources([{ file: 'two.yaml', text: TWO_WINDOWS }]);
    const clock = new ManualClock(T0);
    const store = await make(clock);
    const limiter = new Limiter({ config: () => two, store, clock, tiers: { tierOf: () => undefined } });
    const d = (hits: number, refund = false): DecisionInput => ({
      domain: 'two',
      hits,
      descriptors: [{ entries: [{ key: 'tenant', value: 'x' }], hits, ...(refund && { refund: true }) }],
    });
    await limiter.decide(d(10));
    clock.advance(3_600_000); // a new hour: it holds none of the 10, the day all of them
    await limiter.decide(d(10, true));
    expect((await eventsOf(store)).map((e) => [e.outcome, e.tokens])).toEqual([
      ['charged', 10],
      ['refunded', -10],
    ]);
  });
});

const TWO_WINDOWS = `domain: two
descriptors:
  - key: tenant
    charge_mode: true
    usage: {values: []}
    rate_limits:
      - {unit: hour, requests_per_unit: 1000}
      - {unit: day, requests_per_unit: 10000}
`;
