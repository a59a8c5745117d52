import { describe, expect, it } from 'vitest';
import { compileSources } from '../../src/config/load.js';
import { ManualClock } from '../../src/counters/clock.js';
import { type DecisionInput, Limiter } from '../../src/limiter/limiter.js';
import { type KeeperEvents, type PeerConn, SlotKeeper } from '../../src/limiter/slot-keeper.js';
import type { Store } from '../../src/store/store.js';
import { inFlightCall } from '../helpers/checks.js';
import { everyStore } from '../helpers/stores.js';

// A slot lives as long as its request, and dies soon after its Envoy (issue 61, item 1): with max_hold, a slot
// is renewed a lease at a time while the connection it was taken on is open, up to max_hold; a closed
// connection's slots end within a lease; a drained connection's (its Envoy said GOAWAY) and those of a replica
// that stops go onto their Envoy's list, renewed by any replica the Envoy is connected to. Memory, one Redis,
// a 3-master Cluster; the keeper's passes are run by the test, on the test's clock.

const CONFIG = `domain: k
descriptors:
  - key: tenant
    in_flight: {limit: 2, lease: 3s, max_hold: 60s, request_key: request_id}
`;
const T0 = 1_800_000_000_000;
const take = (id: string, tenant = 'acme'): DecisionInput => inFlightCall({ domain: 'k', key: 'tenant', value: tenant }, id);
const quiet: KeeperEvents = { renewed: () => undefined, unlisted: () => undefined, failed: () => undefined };

interface Replica {
  limiter: Limiter;
  keeper: SlotKeeper;
}

describe('slots renewed while their Envoy is connected, on every store', () => {
  const { stores } = everyStore({ cluster: true });
  const config = compileSources([{ file: 'k.yaml', text: CONFIG }]);
  const replica = (store: Store, clock: ManualClock): Replica => {
    const keeper = new SlotKeeper(store.slotLeases!, () => config, quiet);
    return { keeper, limiter: new Limiter({ config: () => config, store, clock, keeper }) };
  };
  const on = (input: DecisionInput, peer: PeerConn): DecisionInput => ({ ...input, peer });
  /** Moves the clock in steps of a second, a keeper pass after each, and says whether a third take fits. */
  const runFor = async (clock: ManualClock, seconds: number, keepers: SlotKeeper[]) => {
    for (let s = 0; s < seconds; s++) {
      clock.advance(1000);
      for (const k of keepers) await k.renewAll();
    }
  };
  const fits = async (r: Replica, id: string) => !(await r.limiter.decide(take(id))).overLimit;

  it.each(stores)('%s: a request 15 leases long keeps its slot; after max_hold it ends', async (_name, make) => {
    const clock = new ManualClock(T0);
    const a = replica(await make(clock), clock);
    const envoy: PeerConn = { id: 'conn-1', base: 'envoy-1' };
    a.keeper.opened(envoy);
    for (const id of ['r1', 'r2']) expect((await a.limiter.decide(on(take(id), envoy))).overLimit).toBe(false);
    await runFor(clock, 45, [a.keeper]);
    expect(await fits(a, 'probe-1')).toBe(false);
    // max_hold is 60 s from the take: the last renewal gives it until then, and no further.
    await runFor(clock, 16, [a.keeper]);
    expect(await fits(a, 'probe-2')).toBe(true);
  });

  it.each(stores)('%s: a closed connection (its Envoy killed) stops renewing: its slots end within a lease', async (_name, make) => {
    const clock = new ManualClock(T0);
    const a = replica(await make(clock), clock);
    const killed: PeerConn = { id: 'conn-1', base: 'envoy-1' };
    const other: PeerConn = { id: 'conn-2', base: 'envoy-2' };
    a.keeper.opened(other);
    expect((await a.limiter.decide(on(take('r1'), killed))).overLimit).toBe(false);
    expect((await a.limiter.decide(on(take('r2'), other))).overLimit).toBe(false);
    await runFor(clock, 10, [a.keeper]);
    a.keeper.closed(killed);
    await runFor(clock, 2, [a.keeper]);
    expect(await fits(a, 'probe-1')).toBe(false);
    await runFor(clock, 2, [a.keeper]);
    // The killed Envoy's slot came back; the live one's is still held (limit 2: one more fits, not two).
    expect(await fits(a, 'probe-2')).toBe(true);
    expect(await fits(a, 'probe-3')).toBe(false);
  });

  it.each(stores)('%s: a take decided after its connection closed (its call was on the wire) is not renewed', async (_name, make) => {
    const clock = new ManualClock(T0);
    const a = replica(await make(clock), clock);
    const gone: PeerConn = { id: 'conn-1', base: 'envoy-1' };
    a.keeper.opened(gone);
    a.keeper.closed(gone);
    expect((await a.limiter.decide(on(take('r1'), gone))).overLimit).toBe(false);
    expect((await a.limiter.decide(on(take('r2'), gone))).overLimit).toBe(false);
    expect(a.keeper.peers).toBe(0);
    await runFor(clock, 4, [a.keeper]);
    expect(await fits(a, 'probe-1')).toBe(true);
  });

  it.each(stores)('%s: a replica that stops hands its slots to their Envoy, which the next replica renews', async (name, make) => {
    if (name === 'memory') return; // one replica's own: its slots go with the process
    const clock = new ManualClock(T0);
    const store = await make(clock);
    const a = replica(store, clock);
    const b = replica(store, clock);
    const before: PeerConn = { id: 'a.1', base: 'envoy-1' };
    for (const id of ['r1', 'r2']) expect((await a.limiter.decide(on(take(id), before))).overLimit).toBe(false);
    await runFor(clock, 5, [a.keeper]);
    await a.keeper.stop();
    // The Envoy reconnects to another replica and sends any call on it.
    b.keeper.opened({ id: 'b.1', base: 'envoy-1' });
    await runFor(clock, 20, [b.keeper]);
    expect(await fits(b, 'probe-1')).toBe(false);
    // A stream-done call gives one back through the new replica.
    expect((await b.limiter.decide(inFlightCall({ domain: 'k', key: 'tenant', value: 'acme' }, 'r1', true))).overLimit).toBe(false);
    expect(await fits(b, 'probe-2')).toBe(true);
  });

  it.each(stores)('%s: a drained connection (GOAWAY from its Envoy) leaves its slots to the Envoy, not to the end', async (_name, make) => {
    const clock = new ManualClock(T0);
    const a = replica(await make(clock), clock);
    const first: PeerConn = { id: 'a.1', base: 'envoy-1' };
    const next: PeerConn = { id: 'a.2', base: 'envoy-1' };
    for (const id of ['r1', 'r2']) expect((await a.limiter.decide(on(take(id), first))).overLimit).toBe(false);
    a.keeper.opened(next);
    a.keeper.drained(first);
    a.keeper.closed(first);
    await runFor(clock, 20, [a.keeper]);
    expect(await fits(a, 'probe-1')).toBe(false);
    // Then the Envoy goes (its last connection closes without GOAWAY): within a lease the slots are back.
    a.keeper.closed(next);
    await runFor(clock, 4, [a.keeper]);
    expect(await fits(a, 'probe-2')).toBe(true);
  });

  it.each(stores)('%s: without max_hold, nothing is renewed (the lease is the most a slot is held)', async (_name, make) => {
    const clock = new ManualClock(T0);
    const plain = compileSources([{ file: 'k.yaml', text: CONFIG.replace(', max_hold: 60s', '') }]);
    const store = await make(clock);
    const keeper = new SlotKeeper(store.slotLeases!, () => plain, quiet);
    const limiter = new Limiter({ config: () => plain, store, clock, keeper });
    const envoy: PeerConn = { id: 'conn-1', base: 'envoy-1' };
    expect(keeper.period()).toBeUndefined();
    for (const id of ['r1', 'r2']) expect((await limiter.decide(on(take(id), envoy))).overLimit).toBe(false);
    await runFor(clock, 4, [keeper]);
    expect(!(await limiter.decide(take('probe'))).overLimit).toBe(true);
  });
});
