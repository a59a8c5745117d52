import { describe, expect, it } from 'vitest';
import { compileSources } from '../../src/config/load.js';
import { ManualClock } from '../../src/counters/clock.js';
import { fingerprint } from '../../src/fingerprint.js';
import { explain } from '../../src/limiter/explain.js';
import { type Decision, Limiter } from '../../src/limiter/limiter.js';
import type { DecisionInput, DescriptorInput, TierSource } from '../../src/limiter/plan.js';
import { MemoryStore } from '../../src/store/memory-store.js';

/** Explain's "a burst is stopped first by …" against what the limiter actually rejects on: for each request
 * of the table, the request is sent again and again from empty counters until the limiter rejects it, and the
 * windows found full then must include the one explain named (be it, when no other window fills as fast). */

const YAML = `
domain: t
token_key: token
tiers:
  big: {}
descriptors:
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 5, name: general}
  - key: burst
    rate_limit: {unit: minute, requests_per_unit: 20, name: specific, replaces: [{name: general}]}
  - key: two
    rate_limits:
      - {unit: second, requests_per_unit: 5, name: two-per-second}
      - {unit: minute, requests_per_unit: 3, name: two-per-minute}
  - key: tie
    rate_limits:
      - {unit: minute, requests_per_unit: 2, name: tie-minute}
      - {unit: second, requests_per_unit: 2, name: tie-second}
  - key: hitty
    rate_limits:
      - {unit: second, requests_per_unit: 10, name: hitty-second}
      - {unit: minute, requests_per_unit: 4, name: hitty-minute}
  - key: quiet
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1, name: quiet}
  - key: sliding
    algorithm: sliding_window
    rate_limit: {unit: minute, requests_per_unit: 7, name: sliding}
  - key: plan
    value: pro
    descriptors:
      - key: token
        rate_limit: {unit: second, requests_per_unit: 8, name: pro-default}
        tier_limits:
          big:
            - {unit: second, requests_per_unit: 12, name: pro-big-second}
            - {unit: hour, requests_per_unit: 3, name: pro-big-hour}
  - key: bucket
    algorithm: token_bucket
    rate_limits:
      - {unit: second, requests_per_unit: 2, burst: 6, name: bucket-second}
      - {unit: minute, requests_per_unit: 9, algorithm: fixed_window, name: bucket-minute}
  - key: narrow
    rate_limits:
      - {unit: second, requests_per_unit: 2, algorithm: token_bucket, burst: 6, name: narrow-bucket}
      - {unit: minute, requests_per_unit: 4, name: narrow-minute}
  - key: free
    rate_limit: {unlimited: true}
`;
const config = compileSources([{ file: 't.yaml', text: YAML }]);
const tiers: TierSource = { tierOf: (fp) => (fp === fingerprint('big-client') ? 'big' : undefined) };
/** More requests than any window of the table admits. */
const BURST = 40;

const d = (kv: Record<string, string>, extra: Omit<DescriptorInput, 'entries'> = {}): DescriptorInput => ({
  entries: Object.entries(kv).map(([key, value]) => ({ key, value })),
  ...extra,
});

interface Row {
  name: string;
  request: DecisionInput;
  globalShadow?: boolean;
  /** Several windows fill on the same request: explain names one of them. */
  tie?: boolean;
  expected: { descriptor: number; limit: string } | null;
}

const request = (descriptors: DescriptorInput[], hits = 1, domain = 't'): DecisionInput => ({ domain, descriptors, hits });

const TABLE: Row[] = [
  {
    name: 'a replaced limit does not stop it: the replacing one does',
    request: request([d({ client: 'a' }), d({ burst: 'b' })]),
    expected: { descriptor: 1, limit: 'specific' },
  },
  { name: 'the window admitting fewest requests, not the shortest', request: request([d({ two: 'x' })]), expected: { descriptor: 0, limit: 'two-per-minute' } },
  { name: 'a tie goes to the shorter window', request: request([d({ tie: 'x' })]), tie: true, expected: { descriptor: 0, limit: 'tie-second' } },
  { name: "the request's hits", request: request([d({ hitty: 'x' })], 3), expected: { descriptor: 0, limit: 'hitty-minute' } },
  { name: "a descriptor's own hits_addend", request: request([d({ hitty: 'x' }, { hits: 5 })]), expected: { descriptor: 0, limit: 'hitty-minute' } },
  {
    name: "Envoy's per-descriptor limit",
    request: request([d({ two: 'x' }, { override: { requestsPerUnit: 2, unit: 'hour' } })]),
    expected: { descriptor: 0, limit: 't.override.per_hour' },
  },
  {
    name: "Envoy's limit on a descriptor no rule matches",
    request: request([d({ unknown: 'x' }, { override: { requestsPerUnit: 4, unit: 'second' } })]),
    expected: { descriptor: 0, limit: 't.override.per_second' },
  },
  {
    name: 'a shadow descriptor never stops the request',
    request: request([d({ quiet: 'x' }), d({ two: 'y' })]),
    expected: { descriptor: 1, limit: 'two-per-minute' },
  },
  { name: 'a shadow rule alone stops nothing', request: request([d({ quiet: 'x' })]), expected: null },
  { name: 'under --shadow-mode nothing does', request: request([d({ two: 'x' })]), globalShadow: true, expected: null },
  { name: 'a sliding window', request: request([d({ sliding: 'x' })]), expected: { descriptor: 0, limit: 'sliding' } },
  { name: 'a token bucket admits its burst, not its rate', request: request([d({ bucket: 'x' })]), expected: { descriptor: 0, limit: 'bucket-second' } },
  { name: "a token bucket's burst against a window", request: request([d({ narrow: 'x' })]), expected: { descriptor: 0, limit: 'narrow-minute' } },
  { name: 'a token bucket with hits', request: request([d({ bucket: 'x' })], 4), expected: { descriptor: 0, limit: 'bucket-second' } },
  { name: "a client's tier", request: request([d({ plan: 'pro', token: 'Bearer big-client' })]), expected: { descriptor: 0, limit: 'pro-big-hour' } },
  { name: 'a client without a tier', request: request([d({ plan: 'pro', token: 'Bearer small' })]), expected: { descriptor: 0, limit: 'pro-default' } },
  {
    name: 'across descriptors, the fewest requests',
    request: request([d({ two: 'x' }), d({ tie: 'y' })]),
    tie: true,
    expected: { descriptor: 1, limit: 'tie-second' },
  },
  { name: 'check-only requests fill nothing', request: request([d({ two: 'x' }, { hits: 0 })]), expected: null },
  { name: 'an unlimited rule', request: request([d({ free: 'x' })]), expected: null },
  { name: 'an unknown domain', request: request([d({ two: 'x' })], 1, 'nope'), expected: null },
];

/** Sends the request until the limiter rejects it (or BURST times), from empty counters at one instant. */
async function burst(row: Row): Promise<{ rejected: Decision | undefined; decisions: Decision[] }> {
  const clock = new ManualClock(1_800_000_000_123);
  const limiter = new Limiter({ config: () => config, store: new MemoryStore({ clock }), tiers, clock, globalShadow: row.globalShadow });
  const decisions: Decision[] = [];
  for (let i = 0; i < BURST; i++) {
    const decision = await limiter.decide(row.request);
    decisions.push(decision);
    if (decision.overLimit) return { rejected: decision, decisions };
  }
  return { rejected: undefined, decisions };
}

/** The windows found full in a decision, of the descriptors that can reject. */
function blocking(decision: Decision): { descriptor: number; limit: string }[] {
  return decision.descriptors.flatMap((o, descriptor) => (o.shadow ? [] : o.windows.filter((w) => w.over).map((w) => ({ descriptor, limit: w.limit.name }))));
}

describe('explain says which window a burst hits first, as the limiter decides it', () => {
  it.each(TABLE)('$name', async (row) => {
    const e = await explain(config, tiers, row.request, { globalShadow: row.globalShadow });
    expect(e.firstToReject).toEqual(row.expected);
    const { rejected } = await burst(row);
    if (e.firstToReject === null) {
      expect(rejected).toBeUndefined();
      return;
    }
    expect(rejected).toBeDefined();
    const full = blocking(rejected!);
    if (row.tie) expect(full).toContainEqual(e.firstToReject);
    else expect(full).toEqual([e.firstToReject]);
  });

  it.each(TABLE.filter((r) => r.request.descriptors.length === 1))('per descriptor, shadow included: $name', async (row) => {
    const e = await explain(config, tiers, row.request, { globalShadow: row.globalShadow });
    const { decisions } = await burst(row);
    const firstFull = decisions.find((dec) => dec.descriptors[0]!.windows.some((w) => w.over));
    const named = e.descriptors[0]!.firstToReject;
    if (named === null) {
      expect(firstFull).toBeUndefined();
      return;
    }
    expect(firstFull!.descriptors[0]!.windows.filter((w) => w.over).map((w) => w.limit.name)).toContain(named);
  });
});
