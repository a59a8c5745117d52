import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryTierStore } from '../../src/control/tier-store.js';
import { fingerprint } from '../../src/fingerprint.js';
import { configDir, header, type RlsDescriptor, type RlsResponse, startTestService, type TestService } from '../helpers/service.js';

// Envoy 1.40's enable_retry_after_header (envoyproxy/envoy PR #46289, field 19 of the HTTP rate-limit filter):
// on a 429 Envoy writes Retry-After from the largest duration_until_reset among the OVER_LIMIT statuses, at least
// 1 s, unless the service's answer already carries one, which it keeps. Issue 63, item 1: for every kind of
// limit, what such an Envoy writes equals the Retry-After Tollgate writes itself, so either may be turned on; a
// sliding window's status used to say the minute's end (~15 s) where a request fits only later (~45 s).

const CONFIG = `domain: w
token_key: t
tiers:
  gold: {}
descriptors:
  - key: fixed
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: sliding
    algorithm: sliding_window
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: bucket
    rate_limit: {unit: minute, requests_per_unit: 6, algorithm: token_bucket, burst: 2}
  - key: calendar
    rate_limit: {unit: month, calendar: true, requests_per_unit: 2}
  - key: slots
    in_flight: {limit: 2, lease: 45s}
  - key: t
    rate_limit: {unit: hour, requests_per_unit: 2}
    tier_limits:
      gold: [{unit: hour, requests_per_unit: 3}]
  - key: quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: open
`;
// 12.3 s into a minute: a fixed window's end is 47.7 s away, not a whole number of seconds.
const START = 1_800_000_012_300;

/** What Envoy 1.40 writes from the statuses when the service wrote none: the largest duration_until_reset of an
 * OVER_LIMIT one (its whole seconds), at least 1; nothing when the request was not refused. */
function envoyRetryAfter(r: RlsResponse): string | undefined {
  if (r.overall_code !== 'OVER_LIMIT') return undefined;
  const waits = r.statuses.filter((s) => s.code === 'OVER_LIMIT').map((s) => Number(s.duration_until_reset?.seconds ?? 0));
  return String(Math.max(1, ...waits));
}

describe("Envoy 1.40's Retry-After, from the statuses, equals Tollgate's own", () => {
  let s: TestService;
  const tiers = new MemoryTierStore();
  beforeAll(async () => {
    await tiers.assign({ fingerprint: fingerprint('vip'), tier: 'gold', assignedAt: new Date().toISOString(), by: 'test' });
    s = await startTestService({ configDir: configDir({ 'w.yaml': CONFIG }), tiers, startMs: START });
  });
  afterAll(() => s?.close());
  const call = (...descriptors: RlsDescriptor[]) => s.rls.call({ domain: 'w', descriptors });
  const one = (key: string, value: string, extra: Partial<RlsDescriptor> = {}): RlsDescriptor => ({ entries: [{ key, value }], ...extra });

  const cases: [string, () => RlsDescriptor[]][] = [
    ['fixed window', () => [one('fixed', 'a')]],
    ['sliding window', () => [one('sliding', 'a')]],
    ['token bucket', () => [one('bucket', 'a')]],
    ['calendar month', () => [one('calendar', 'a')]],
    ['in-flight slots', () => [{ entries: [{ key: 'slots', value: 'a' }] }]],
    ['a tier', () => [one('t', 'vip')]],
    ["Envoy's own limit", () => [one('open', 'a', { limit: { requests_per_unit: 2, unit: 'HOUR' } })]],
    ['quota mode, every quota descriptor over', () => [one('quota', 'a')]],
    ['two descriptors, the longer wait', () => [one('fixed', 'b'), one('calendar', 'b')]],
  ];

  it.each(cases)('%s', async (_name, descriptors) => {
    let last: RlsResponse | undefined;
    // Past every limit (the largest is the tier's 3); the sliding window's earlier minute counted too.
    for (let i = 0; i < 5; i++) last = await call(...descriptors());
    expect(last!.overall_code).toBe('OVER_LIMIT');
    const own = header(last!, 'Retry-After');
    expect(own).toMatch(/^\d+$/);
    expect(envoyRetryAfter(last!)).toBe(own);
    // No two Retry-After headers: the service wrote one, which Envoy keeps.
    expect(last!.response_headers_to_add.filter((h) => h.key.toLowerCase() === 'retry-after')).toHaveLength(1);
  });

  it('a sliding window says when a request fits, not where its minute ends', async () => {
    s.clock.advance(60_000 - (s.clock.now() % 60_000) + 45_000); // 45 s into a new minute
    for (let i = 0; i < 2; i++) await call(one('sliding', 'late'));
    const r = await call(one('sliding', 'late'));
    expect(r.statuses[0]!.duration_until_reset!.seconds).toBeGreaterThan(15); // the minute ends in 15 s
    expect(String(r.statuses[0]!.duration_until_reset!.seconds)).toBe(header(r, 'Retry-After'));
  });
});

// Envoy 1.39's static limit on a route's action (RateLimit.limit's oneof, rate_limit = 2) goes on the wire as the
// descriptor's own limit (RateLimitDescriptor.limit), beside the descriptor's hits_addend: both are honoured.
describe("Envoy 1.39's static limit with a hits_addend, as Envoy sends them", () => {
  let s: TestService;
  beforeAll(async () => {
    s = await startTestService({ configDir: configDir({ 'w.yaml': CONFIG }), startMs: START });
  });
  afterAll(() => s?.close());

  it('counts the hits against the limit the descriptor carries', async () => {
    const d = { entries: [{ key: 'fixed', value: 'static' }], limit: { requests_per_unit: 10, unit: 'MINUTE' }, hits_addend: { value: 4 } };
    const answers = [];
    for (let i = 0; i < 3; i++) answers.push(await s.rls.call({ domain: 'w', descriptors: [d] }));
    expect(answers.map((r) => [r.overall_code, r.statuses[0]!.limit_remaining, r.statuses[0]!.current_limit?.requests_per_unit])).toEqual([
      ['OK', 6, 10],
      ['OK', 2, 10],
      ['OVER_LIMIT', 2, 10],
    ]);
  });
});
