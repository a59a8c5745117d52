import { describe, expect, it } from 'vitest';
import { fingerprint } from '../../src/fingerprint.js';
import type { Decision } from '../../src/limiter/limiter.js';
import { peekWindows } from '../../src/limiter/peek.js';
import { noTiers, planRequest } from '../../src/limiter/plan.js';
import { compileYaml, entries, harness, T0 } from '../helpers/decide.js';

// The Limiter over the in-process store, on a manual clock: every window boundary is where the test puts it.

const SHOP = `
domain: shop
token_key: token
tiers:
  gold: {}
descriptors:
  - key: fixed
    rate_limit: {unit: second, requests_per_unit: 3, name: fixed-3s}
  - key: sliding
    algorithm: sliding_window
    rate_limit: {unit: minute, requests_per_unit: 4, name: sliding-4m}
  - key: pair
    rate_limits:
      - {unit: second, requests_per_unit: 2, name: pair-second}
      - {unit: minute, requests_per_unit: 3, name: pair-minute}
  - key: general
    rate_limit: {unit: second, requests_per_unit: 1, name: general}
  - key: specific
    rate_limit: {unit: second, requests_per_unit: 5, name: specific, replaces: [{name: general}]}
  - key: token
    rate_limit: {unit: second, requests_per_unit: 2, name: token-second}
    tier_limits:
      gold:
        - {unit: second, requests_per_unit: 4, name: gold-second}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1, name: trial}
  - key: free
    rate_limit: {unlimited: true}
`;

const over = (ds: Decision[]): boolean[] => ds.map((d) => d.overLimit);
const remaining = (d: Decision, descriptor = 0): number[] => d.descriptors[descriptor]!.windows.map((w) => w.remaining);

async function times(n: number, decide: () => Promise<Decision>): Promise<Decision[]> {
  const out: Decision[] = [];
  for (let i = 0; i < n; i++) out.push(await decide());
  return out;
}

describe('fixed windows', () => {
  it('admits up to the limit within a window, then refuses until the epoch-aligned boundary', async () => {
    const h = harness(SHOP);
    const rs = await times(4, () => h.decide('shop', [{ fixed: 'a' }]));
    expect(over(rs)).toEqual([false, false, false, true]);
    expect(rs.map((d) => remaining(d)[0])).toEqual([2, 1, 0, 0]);
    expect(rs[3]!.descriptors[0]!.windows[0]).toMatchObject({ over: true, resetAtMs: T0 + 1000, retryAfterMs: 1000 });
    expect(rs[3]!.retryAfterMs).toBe(1000);
    expect(rs[0]!.source).toBe('store');

    h.clock.advance(400);
    expect((await h.decide('shop', [{ fixed: 'a' }])).retryAfterMs).toBe(600);
    expect((await h.decide('shop', [{ fixed: 'b' }])).overLimit).toBe(false); // each value counts apart
    h.clock.set(T0 + 1000);
    const next = await h.decide('shop', [{ fixed: 'a' }]);
    expect(next.overLimit).toBe(false);
    expect(remaining(next)).toEqual([2]);
  });
});

describe('sliding windows', () => {
  it('weigh the previous window by how much of it still overlaps the last minute', async () => {
    const h = harness(SHOP);
    expect(over(await times(5, () => h.decide('shop', [{ sliding: 's' }])))).toEqual([false, false, false, false, true]);
    // 15 s into the next minute, 4 × 45/60 = 3 of the previous window still count: one more fits.
    h.clock.set(T0 + 75_000);
    const rs = await times(2, () => h.decide('shop', [{ sliding: 's' }]));
    expect(over(rs)).toEqual([false, true]);
    expect(remaining(rs[0]!)).toEqual([0]);
    // 4 × (60 − e)/60 + 1 + 1 ≤ 4 from e = 30 s on: 15 s from now.
    expect(rs[1]!.retryAfterMs).toBe(15_000);
    h.clock.set(T0 + 90_000);
    expect((await h.decide('shop', [{ sliding: 's' }])).overLimit).toBe(false);
  });
});

describe('several windows: all or nothing', () => {
  it('a request over one window of a descriptor counts in none of them', async () => {
    const h = harness(SHOP);
    const rs = await times(3, () => h.decide('shop', [{ pair: 'p' }]));
    expect(over(rs)).toEqual([false, false, true]);
    expect(rs[2]!.descriptors[0]!.windows.map((w) => [w.limit.name, w.over, w.remaining])).toEqual([
      ['pair-second', true, 0],
      ['pair-minute', false, 1],
    ]);
    h.clock.set(T0 + 1000);
    const [third, fourth] = await times(2, () => h.decide('shop', [{ pair: 'p' }]));
    expect(third!.overLimit).toBe(false); // the refused request left the minute at 2
    expect(fourth!.descriptors[0]!.windows.map((w) => w.over)).toEqual([false, true]);
    expect(fourth!.retryAfterMs).toBe(59_000);
  });

  it('a request over in one descriptor counts in no other descriptor', async () => {
    const h = harness(SHOP);
    const both: Record<string, string>[] = [{ fixed: 'f' }, { pair: 'p' }];
    expect(over(await times(3, () => h.decide('shop', both)))).toEqual([false, false, true]);
    // fixed-3s saw two counted requests, not three.
    expect(remaining(await h.decide('shop', [{ fixed: 'f' }]))).toEqual([0]);
    expect((await h.decide('shop', [{ fixed: 'f' }])).overLimit).toBe(true);
  });
});

describe('replaces', () => {
  it("a limit named in another matched descriptor's replaces does not apply, and is not counted", async () => {
    const h = harness(SHOP);
    const rs = await times(3, () => h.decide('shop', [{ general: 'g' }, { specific: 's' }]));
    expect(over(rs)).toEqual([false, false, false]);
    expect(rs[2]!.descriptors[0]!.windows).toEqual([]);
    expect(rs[2]!.descriptors[0]!.rule?.id).toBe('general');
    expect(rs[2]!.descriptors[1]!.windows.map((w) => [w.limit.name, w.remaining])).toEqual([['specific', 2]]);
    // Alone, general applies again, from a counter the replaced requests never touched.
    expect(over(await times(2, () => h.decide('shop', [{ general: 'g' }])))).toEqual([false, true]);
  });
});

describe('tiers', () => {
  it("a client in a tier is held to the tier's limits; others to the rule's", async () => {
    const gold = fingerprint('Bearer gold');
    const h = harness(SHOP, { tiers: { tierOf: (fp) => (fp === gold ? 'gold' : undefined) } });
    const golden = await times(5, () => h.decide('shop', [{ token: 'Bearer gold' }]));
    expect(over(golden)).toEqual([false, false, false, false, true]);
    expect(golden[0]!.descriptors[0]).toMatchObject({ tier: 'gold' });
    expect(golden[0]!.descriptors[0]!.windows[0]!.limit.name).toBe('gold-second');
    const plain = await times(3, () => h.decide('shop', [{ token: 'Bearer plain' }]));
    expect(over(plain)).toEqual([false, false, true]);
    expect(plain[0]!.descriptors[0]!.tier).toBeUndefined();
    expect(plain[0]!.descriptors[0]!.windows[0]!.limit.name).toBe('token-second');
  });
});

describe("Envoy's per-descriptor limit override", () => {
  it('wins over the config, with a name of its own', async () => {
    const h = harness(SHOP);
    const d = { entries: entries({ fixed: 'o' }), override: { requestsPerUnit: 1, unit: 'minute' as const } };
    const rs = await times(2, () => h.decide('shop', [d]));
    expect(over(rs)).toEqual([false, true]);
    expect(rs[1]!.descriptors[0]!.windows[0]!.limit).toMatchObject({ name: 'shop.override.per_minute', windowSeconds: 60, requestsPerUnit: 1 });
    expect(rs[1]!.retryAfterMs).toBe(60_000);
  });

  it('on a matched rule, shares its counter for the same unit', async () => {
    const h = harness(SHOP);
    await times(3, () => h.decide('shop', [{ fixed: 'shared' }]));
    const d = { entries: entries({ fixed: 'shared' }), override: { requestsPerUnit: 5, unit: 'second' as const } };
    expect(remaining(await h.decide('shop', [d]))).toEqual([1]);
  });

  it('limits a descriptor no rule matches, each value on its own counter', async () => {
    const h = harness(SHOP);
    const d = (v: string) => ({ entries: entries({ nomatch: v }), override: { requestsPerUnit: 1, unit: 'second' as const } });
    expect(over(await times(2, () => h.decide('shop', [d('v1')])))).toEqual([false, true]);
    expect((await h.decide('shop', [d('v2')])).overLimit).toBe(false);
  });
});

describe('hits', () => {
  it('a request counts its hits_addend; a request larger than the room is refused whole', async () => {
    const h = harness(SHOP);
    const first = await h.decide('shop', [{ fixed: 'n' }], 2);
    expect(first.descriptors[0]!.hits).toBe(2);
    expect(remaining(first)).toEqual([1]);
    const second = await h.decide('shop', [{ fixed: 'n' }], 2);
    expect(second.overLimit).toBe(true);
    expect(remaining(second)).toEqual([1]);
    expect((await h.decide('shop', [{ fixed: 'n' }], 1)).overLimit).toBe(false);
  });

  it('more hits than the limit can never fit: wait a whole window', async () => {
    const h = harness(SHOP);
    h.clock.advance(250);
    const d = await h.decide('shop', [{ fixed: 'big' }], 4);
    expect(d.overLimit).toBe(true);
    expect(d.retryAfterMs).toBe(1000);
    expect(remaining(await h.decide('shop', [{ fixed: 'big' }], 1))).toEqual([2]);
  });

  it('hits_addend 0 on a descriptor only checks: it counts nothing, and is over once one more would not fit', async () => {
    const h = harness(SHOP);
    const check = { entries: entries({ fixed: 'c' }), hits: 0 };
    const probe = await h.decide('shop', [check], 5); // the descriptor's 0 wins over the request's 5
    expect(probe.overLimit).toBe(false);
    expect(probe.descriptors[0]!.hits).toBe(0);
    expect(remaining(probe)).toEqual([3]);
    await times(3, () => h.decide('shop', [{ fixed: 'c' }]));
    const full = await h.decide('shop', [check]);
    expect(full.overLimit).toBe(true);
    expect(full.descriptors[0]!.windows[0]!.over).toBe(true);
  });
});

describe('shadow mode', () => {
  it('global shadow: every verdict reported, every request admitted, no wait advised', async () => {
    const h = harness(SHOP, { globalShadow: true });
    const rs = await times(4, () => h.decide('shop', [{ fixed: 'g' }]));
    expect(over(rs)).toEqual([false, false, false, false]);
    expect(rs[3]!.descriptors[0]).toMatchObject({ over: true, shadow: true });
    expect(rs[3]!.retryAfterMs).toBe(0);
    expect(remaining(rs[3]!)).toEqual([0]);
    // A shadow descriptor over its limit is not counted either: 2 + 2 > 3 leaves 1.
    await h.decide('shop', [{ fixed: 'g2' }], 2);
    const refused = await h.decide('shop', [{ fixed: 'g2' }], 2);
    expect(refused.descriptors[0]!.over).toBe(true);
    expect(remaining(refused)).toEqual([1]);
  });

  it('a shadow rule never blocks, beside an enforced descriptor that does', async () => {
    const h = harness(SHOP);
    const rs = await times(4, () => h.decide('shop', [{ trial: 't' }, { fixed: 'f' }]));
    expect(rs.map((d) => d.descriptors[0]!.over)).toEqual([false, true, true, true]);
    expect(rs.map((d) => d.descriptors[0]!.shadow)).toEqual([true, true, true, true]);
    expect(over(rs)).toEqual([false, false, false, true]);
  });
});

describe('nothing to count', () => {
  it("an unknown domain is admitted without a store call, at the injected clock's time, even with an override", async () => {
    const h = harness(SHOP);
    h.clock.advance(123);
    const d = await h.decide('nowhere', [{ entries: entries({ fixed: 'x' }), override: { requestsPerUnit: 0, unit: 'second' } }]);
    expect(d).toMatchObject({ domain: undefined, overLimit: false, source: 'none', nowMs: T0 + 123, retryAfterMs: 0 });
    expect(d.descriptors).toEqual([
      {
        rule: undefined,
        hits: 1,
        tier: undefined,
        shadow: false,
        shadowStatus: false,
        quota: false,
        unlimited: false,
        over: false,
        windows: [],
        refundIgnored: false,
      },
    ]);
    expect(h.store.size).toBe(0);
  });

  it('an unmatched descriptor and an unlimited rule limit nothing', async () => {
    const h = harness(SHOP);
    const d = await h.decide('shop', [{ colour: 'blue' }, { free: 'x' }]);
    expect(d).toMatchObject({ overLimit: false, source: 'none' });
    expect(d.descriptors.map((o) => [o.rule?.id, o.windows.length])).toEqual([
      [undefined, 0],
      ['free', 0],
    ]);
    expect(h.store.size).toBe(0);
  });
});

const BUCKETS = `
domain: tb
descriptors:
  - key: bucket
    algorithm: token_bucket
    rate_limit: {unit: second, requests_per_unit: 10, burst: 20, name: tb}
  - key: even
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 1, name: even}
  - key: mixed
    rate_limits:
      - {unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 20, name: mixed-tb}
      - {unit: hour, requests_per_unit: 20, name: mixed-hour}
`;

describe('token buckets (GCRA): 10 per second, burst 20', () => {
  it('remaining counts whole tokens; reset is when the bucket is full; retry is when one more fits', async () => {
    const h = harness(BUCKETS);
    const rs = await times(21, () => h.decide('tb', [{ bucket: 'a' }]));
    expect(over(rs)).toEqual([...Array(20).fill(false), true]);
    expect(rs.map((d) => remaining(d)[0])).toEqual([...Array.from({ length: 20 }, (_, i) => 19 - i), 0]);
    expect(rs[0]!.descriptors[0]!.windows[0]).toMatchObject({ resetAtMs: T0 + 100, over: false, retryAfterMs: 0 });
    expect(rs[20]!.descriptors[0]!.windows[0]).toMatchObject({ resetAtMs: T0 + 2000, over: true, retryAfterMs: 100 });
    expect(rs[20]!.retryAfterMs).toBe(100);
    h.clock.advance(30);
    expect((await h.decide('tb', [{ bucket: 'a' }])).retryAfterMs).toBe(70);
    h.clock.advance(170);
    const refilled = await h.decide('tb', [{ bucket: 'a' }]);
    expect([refilled.overLimit, remaining(refilled)[0]]).toEqual([false, 1]);
  });

  it('burst 1 admits evenly: one request per 100 ms', async () => {
    const h = harness(BUCKETS);
    expect((await h.decide('tb', [{ even: 'a' }])).overLimit).toBe(false);
    h.clock.advance(99);
    const early = await h.decide('tb', [{ even: 'a' }]);
    expect([early.overLimit, early.retryAfterMs]).toEqual([true, 1]);
    h.clock.advance(1);
    expect((await h.decide('tb', [{ even: 'a' }])).overLimit).toBe(false);
  });

  it('hits_addend takes that many tokens; more than the burst is refused with the wait until the bucket is full', async () => {
    const h = harness(BUCKETS);
    const five = await h.decide('tb', [{ bucket: 'a' }], 5);
    expect(remaining(five)).toEqual([15]);
    const tooMany = await h.decide('tb', [{ bucket: 'a' }], 21);
    expect(tooMany.overLimit).toBe(true);
    expect(tooMany.retryAfterMs).toBe(500);
    expect(remaining(tooMany)).toEqual([15]);
    h.clock.advance(500);
    const onFull = await h.decide('tb', [{ bucket: 'a' }], 21);
    expect([onFull.overLimit, onFull.retryAfterMs]).toEqual([true, 1]);
  });

  it('mixed with a fixed hourly window: the wait covers every blocking limit', async () => {
    const h = harness(BUCKETS);
    await times(20, () => h.decide('tb', [{ mixed: 'a' }]));
    const d = await h.decide('tb', [{ mixed: 'a' }]);
    expect(d.descriptors[0]!.windows.map((w) => [w.limit.name, w.over, w.retryAfterMs])).toEqual([
      ['mixed-tb', true, 100],
      ['mixed-hour', true, 3_600_000],
    ]);
    expect(d.retryAfterMs).toBe(3_600_000);
  });

  it("Envoy's limit override keeps the bucket of the limit it stands in for, with its requests_per_unit as the burst", async () => {
    const h = harness(BUCKETS);
    // `even` is a bucket by its limit's own algorithm; its rule's is the default fixed window.
    const d = { entries: entries({ even: 'o' }), override: { requestsPerUnit: 2, unit: 'second' as const } };
    const rs = await times(3, () => h.decide('tb', [d]));
    expect(over(rs)).toEqual([false, false, true]);
    expect(rs[2]!.descriptors[0]!.windows[0]!.limit).toMatchObject({ algorithm: 'token_bucket', burst: 2 });
    expect(rs[2]!.retryAfterMs).toBe(500);
  });
});

describe('peekWindows (explain, inspect) on a token bucket', () => {
  it('reads tokens taken, whole tokens left, full or not, and when it is full, counting nothing', async () => {
    const h = harness(BUCKETS);
    const config = compileYaml(BUCKETS);
    const plans = () =>
      planRequest(config.domains.get('tb'), { descriptors: [{ entries: entries({ bucket: 'p' }) }], hits: 1 }, { tiers: noTiers, globalShadow: false });
    await times(20, () => h.decide('tb', [{ bucket: 'p' }]));
    h.clock.advance(50);
    const full = (await peekWindows(h.store, plans()))[0]![0];
    expect(full).toEqual({ used: 19.5, remaining: 0, full: true, resetAtMs: T0 + 2000 });
    h.clock.advance(100);
    const use = (await peekWindows(h.store, plans()))[0]![0];
    expect(use).toEqual({ used: 18.5, remaining: 1, full: false, resetAtMs: T0 + 2000 });
    // The peeks took nothing: one token is there for the next request, and only one.
    expect(over(await times(2, () => h.decide('tb', [{ bucket: 'p' }])))).toEqual([false, true]);
  });
});
