import { describe, expect, it } from 'vitest';
import { compileSources } from '../../src/config/load.js';
import { counterKey, counterKeyOf, windowKey } from '../../src/counters/keys.js';
import { fingerprint } from '../../src/fingerprint.js';
import { type DescriptorInput, noTiers, type PlanContext, planForClient, planRequest, toChecks, traceRequest } from '../../src/limiter/plan.js';
import { FIXED } from '../helpers/kinds.js';

const YAML = `
domain: p
token_key: token
tiers:
  big: {}
descriptors:
  - key: category
    value: read
    rate_limit: {unit: second, requests_per_unit: 10, name: read-anonymous}
    descriptors:
      - key: token
        rate_limits:
          - {unit: second, requests_per_unit: 10, name: read-per-second}
          - {unit: hour, requests_per_unit: 1000, name: read-per-hour}
        tier_limits:
          big:
            - {unit: second, requests_per_unit: 30}
  - key: path
    value: /admin*
    algorithm: sliding_window
    rate_limit: {unit: minute, requests_per_unit: 3, name: admin, replaces: [{name: read-per-second}]}
  - key: quiet
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1, name: quiet}
  - key: free
    rate_limit: {unlimited: true}
`;
const config = compileSources([{ file: 'p.yaml', text: YAML }]);
const domain = config.domains.get('p')!;
const ctx: PlanContext = { tiers: noTiers, globalShadow: false };
const d = (kv: Record<string, string>, extra: Omit<DescriptorInput, 'entries'> = {}): DescriptorInput => ({
  entries: Object.entries(kv).map(([key, value]) => ({ key, value })),
  ...extra,
});
const names = (limits: readonly { name: string }[]) => limits.map((l) => l.name);

describe('planRequest: what each descriptor counts against', () => {
  it('a rule with varying values: its limits, and a counter per token', () => {
    const [p] = planRequest(domain, { descriptors: [d({ category: 'read', token: 'Bearer t' })], hits: 1 }, ctx);
    expect(p).toMatchObject({ tier: undefined, shadow: false, hits: 1, override: false });
    expect(p!.rule?.id).toBe('category_read.token');
    expect(names(p!.limits)).toEqual(['read-per-second', 'read-per-hour']);
    expect(p!.key).toBe(counterKeyOf(p!.rule!.counterId, fingerprint('t')));
  });

  it("the tier lookup: the token's fingerprint selects the tier's limits", () => {
    const tiers = { tierOf: (fp: string) => (fp === fingerprint('big-client') ? 'big' : undefined) };
    const [p] = planRequest(domain, { descriptors: [d({ category: 'read', token: 'big-client' })], hits: 1 }, { ...ctx, tiers });
    expect(p!.tier).toBe('big');
    expect(p!.limits.map((l) => l.requestsPerUnit)).toEqual([30]);
  });

  it('replaces applies across the descriptors of one request', () => {
    const plans = planRequest(domain, { descriptors: [d({ category: 'read', token: 't' }), d({ path: '/admin/x' })], hits: 1 }, ctx);
    expect(names(plans[0]!.limits)).toEqual(['read-per-hour']);
    expect(names(plans[1]!.limits)).toEqual(['admin']);
    expect(plans[1]!.limits[0]!.algorithm).toBe('sliding_window');
    // Alone, the same descriptor keeps its limit.
    expect(names(planRequest(domain, { descriptors: [d({ category: 'read', token: 't' })], hits: 1 }, ctx)[0]!.limits)).toContain('read-per-second');
  });

  it("Envoy's per-descriptor limit replaces the config's and counts on the rule's counters", () => {
    const override = { requestsPerUnit: 2, unit: 'hour' as const };
    const [withRule, without] = planRequest(
      domain,
      { descriptors: [d({ category: 'read', token: 't' }, { override }), d({ nothing: 'here' }, { override })], hits: 1 },
      ctx,
    );
    expect(withRule).toMatchObject({ override: true, tier: undefined });
    expect(withRule!.limits).toEqual([expect.objectContaining({ name: 'p.override.per_hour', requestsPerUnit: 2, windowSeconds: 3600 })]);
    expect(withRule!.key).toBe(counterKey(withRule!.rule!.counterId, withRule!.rule!.variable, d({ category: 'read', token: 't' }).entries));
    expect(without!.rule).toBeUndefined();
    expect(without!.key).toMatch(/^p:~override:[0-9a-f]{32}:\{[0-9a-f]{32}\}$/);
  });

  it("shadow: the rule's shadow_mode, or the service's --shadow-mode for every descriptor", () => {
    const request = { descriptors: [d({ quiet: 'x' }), d({ category: 'read', token: 't' })], hits: 1 };
    expect(planRequest(domain, request, ctx).map((p) => p.shadow)).toEqual([true, false]);
    expect(planRequest(domain, request, { ...ctx, globalShadow: true }).map((p) => p.shadow)).toEqual([true, true]);
  });

  it("hits: the descriptor's own hits_addend wins over the request's", () => {
    const plans = planRequest(domain, { descriptors: [d({ category: 'read' }, { hits: 0 }), d({ category: 'read' })], hits: 4 }, ctx);
    expect(plans.map((p) => p.hits)).toEqual([0, 4]);
  });

  it('nothing limits an unknown domain, an unmatched descriptor or an unlimited rule', () => {
    const unknown = planRequest(undefined, { descriptors: [d({ category: 'read' })], hits: 1 }, ctx);
    const none = planRequest(domain, { descriptors: [d({ other: 'x' }), d({ free: 'y' })], hits: 1 }, ctx);
    for (const p of [...unknown, ...none]) expect(p).toMatchObject({ limits: [], key: '' });
    expect(none[1]!.rule?.unlimited).toBe(true);
  });

  it('the checks: one per window, keyed by counter and unit, grouped by descriptor; peek counts nothing', () => {
    const plans = planRequest(domain, { descriptors: [d({ category: 'read', token: 't' }), d({ quiet: 'x' })], hits: 3 }, ctx);
    const checks = toChecks(plans);
    expect(checks.map((c) => [c.key, c.group, c.hits, c.shadow])).toEqual([
      [windowKey(plans[0]!.key, 'second'), 0, 3, false],
      [windowKey(plans[0]!.key, 'hour'), 0, 3, false],
      [windowKey(plans[1]!.key, 'second'), 1, 3, true],
    ]);
    expect(toChecks(plans, true).every((c) => c.hits === 0 && c.shadow)).toBe(true);
  });
});

describe('traceRequest: how each entry matched', () => {
  it('exact, wildcard and default key, with file:line; the walk stops at the first entry that matches nothing', () => {
    const { trace } = traceRequest(
      domain,
      { descriptors: [d({ category: 'read', token: 't' }), d({ path: '/admin/users' }), d({ category: 'nope', token: 't' })], hits: 1 },
      ctx,
    );
    expect(trace.steps[0]).toEqual([
      { matched: 'exact', level: true, knownKey: true, source: 'p.yaml:7' },
      { matched: 'default', level: true, knownKey: true, source: 'p.yaml:11' },
    ]);
    expect(trace.steps[1]).toEqual([{ matched: 'wildcard', level: true, knownKey: true, pattern: '/admin*', shared: false, source: 'p.yaml:18' }]);
    // Where nothing matched, what the config has there: its keys at that level and the key's values.
    expect(trace.steps[2]).toEqual([
      { matched: 'none', level: true, knownKey: true, expected: { keys: ['category', 'path', 'quiet', 'free'], values: ['read'] } },
    ]);
  });

  it('keeps the limits before replaces, and who replaced what', () => {
    const { plans, trace } = traceRequest(domain, { descriptors: [d({ category: 'read', token: 't' }), d({ path: '/admin/x' })], hits: 1 }, ctx);
    expect(names(trace.configured[0]!)).toEqual(['read-per-second', 'read-per-hour']);
    expect(names(plans[0]!.limits)).toEqual(['read-per-hour']);
    expect([...trace.replacedBy]).toEqual([['read-per-second', 'admin']]);
  });
});

describe('planForClient: a client known only by fingerprint (the admin API)', () => {
  it('plans the same limits and counter as a request carrying that token', () => {
    const tiers = { tierOf: (fp: string) => (fp === fingerprint('big-client') ? 'big' : undefined) };
    const [fromRequest] = planRequest(domain, { descriptors: [d({ category: 'read', token: 'Bearer big-client' })], hits: 1 }, { ...ctx, tiers });
    const forClient = planForClient(fromRequest!.rule!, fingerprint('big-client'), tiers);
    expect(forClient).toMatchObject({ key: fromRequest!.key, tier: 'big', limits: fromRequest!.limits, hits: 0 });
  });
});

describe("Envoy's limit on a token-bucket rule (issue 22, item 5)", () => {
  const bucket = compileSources([
    { file: 'b.yaml', text: 'domain: b\ndescriptors:\n  - key: client\n    algorithm: token_bucket\n    rate_limit: {unit: year, requests_per_unit: 100}\n' },
  ]).domains.get('b')!;
  const plan = (requestsPerUnit: number, unit: 'year' | 'second') =>
    toChecks(planRequest(bucket, { descriptors: [{ entries: [{ key: 'client', value: 'x' }], override: { requestsPerUnit, unit } }], hits: 1 }, ctx))[0]!;

  it('stays a bucket while its numbers can be kept exactly', () => {
    expect(plan(100, 'year').burst).toBe(100);
    expect(plan(4294967295, 'second').burst).toBe(4294967295); // 4.3e12 ticks: exact
  });

  it('is a fixed window when burst × window would pass 2^53 (4294967295 a year: 1.35e20 ticks), so Redis and memory agree', () => {
    const c = plan(4294967295, 'year');
    expect([c.burst, c.kind, c.limit]).toEqual([0, FIXED, 4294967295]);
  });
});
