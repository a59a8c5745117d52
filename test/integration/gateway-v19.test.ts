import { describe, expect, it } from 'vitest';
import { compileSources } from '../../src/config/load.js';
import { configLimits } from '../../src/config/read-dir.js';
import { RLS_CONFIG_TYPE_URL, xdsSources } from '../../src/config/rls-conf.js';
import { ManualClock } from '../../src/counters/clock.js';
import { Limiter } from '../../src/limiter/limiter.js';
import type { DecisionInput } from '../../src/limiter/plan.js';
import { toWireResponse } from '../../src/response/response.js';
import { MemoryStore } from '../../src/store/memory-store.js';
import { encodeConfig } from '../helpers/ads-server.js';
import { configDir, header, startTestService } from '../helpers/service.js';

// Envoy Gateway v1.9's configs over xDS, and envoyproxy/ratelimit's USE_CALENDAR_MONTH_RATE_LIMIT (issue 63, item
// 2). envoyproxy/ratelimit (src/limiter/base_limiter.go, GetResponseDescriptorStatus: over when the count after
// the hits passes requests_per_unit) refuses every request of a rule of requests_per_unit 0, which Envoy Gateway
// v1.9 now generates for `requests: 0` (#9333); WEEK is RateLimitUnit 7 (rls_conf.proto, out of order); and PR
// #1206 makes MONTH the UTC calendar month, its reset the time to the month's end, when the setting is true.

const eg = (descriptors: unknown[]) => [{ typeUrl: RLS_CONFIG_TYPE_URL, value: encodeConfig({ name: 'default/eg', domain: 'eg', descriptors }) }];
const one = (key: string, value: string, hits = 1): DecisionInput => ({ domain: 'eg', hits, descriptors: [{ entries: [{ key, value }] }] });

// March 31, 2027, 23:59 UTC: a minute before a calendar month turns, and not where a 30-day window from the epoch does.
function fromXds(descriptors: unknown[], calendar = false, startMs = Date.UTC(2027, 2, 31, 23, 59, 0)) {
  const config = compileSources(xdsSources(eg(descriptors), configLimits()), false, calendar);
  const clock = new ManualClock(startMs);
  const limiter = new Limiter({ config: () => config, store: new MemoryStore({ clock }), clock, tiers: { tierOf: () => undefined } });
  return { limiter, clock };
}

describe("Envoy Gateway v1.9's rules over xDS, answered as envoyproxy/ratelimit answers them", () => {
  it('requests_per_unit 0 blocks every request of the rule, and only it', async () => {
    const { limiter } = fromXds([
      { key: 'blocked', rate_limit: { unit: 'MINUTE', requests_per_unit: 0 } },
      { key: 'open', rate_limit: { unit: 'MINUTE', requests_per_unit: 5 } },
    ]);
    for (let i = 0; i < 3; i++) expect((await limiter.decide(one('blocked', `v${i}`))).overLimit).toBe(true);
    expect((await limiter.decide(one('open', 'v'))).overLimit).toBe(false);
  });

  it('a WEEK unit (7) is a week of 7 days, named WEEK on the wire', async () => {
    const { limiter, clock } = fromXds([{ key: 'k', rate_limit: { unit: 'WEEK', requests_per_unit: 2 } }]);
    for (let i = 0; i < 2; i++) expect((await limiter.decide(one('k', 'v'))).overLimit).toBe(false);
    const d = await limiter.decide(one('k', 'v'));
    expect(d.overLimit).toBe(true);
    expect(toWireResponse(d).statuses[0]!.current_limit!.unit).toBe(7);
    clock.advance(7 * 86_400_000);
    expect((await limiter.decide(one('k', 'v'))).overLimit).toBe(false);
  });

  it('USE_CALENDAR_MONTH_RATE_LIMIT: MONTH is the calendar month (its end is the reset), else 30 days from the epoch', async () => {
    const month = [{ key: 'k', rate_limit: { unit: 'MONTH', requests_per_unit: 2 } }];
    for (const calendar of [true, false]) {
      const { limiter, clock } = fromXds(month, calendar);
      await limiter.decide(one('k', 'v', 2));
      const full = await limiter.decide(one('k', 'v'));
      expect(full.overLimit).toBe(true);
      // On March 31 at 23:59 UTC the calendar month ends in a minute.
      const reset = toWireResponse(full).statuses[0]!.duration_until_reset!.seconds;
      if (calendar) expect(reset).toBe(60);
      else expect(reset).toBeGreaterThan(60);
      clock.advance(61_000); // April
      expect((await limiter.decide(one('k', 'v'))).overLimit).toBe(!calendar);
    }
  });

  it("USE_CALENDAR_MONTH_RATE_LIMIT: Envoy's own MONTH limit too, and a config file read by the service", async () => {
    const { limiter, clock } = fromXds([{ key: 'open' }], true);
    const own = (): DecisionInput => ({
      domain: 'eg',
      hits: 1,
      descriptors: [{ entries: [{ key: 'open', value: 'v' }], override: { requestsPerUnit: 1, unit: 'month' } }],
    });
    expect((await limiter.decide(own())).overLimit).toBe(false);
    expect((await limiter.decide(own())).overLimit).toBe(true);
    clock.advance(61_000);
    expect((await limiter.decide(own())).overLimit).toBe(false);
    const dir = configDir({ 'm.yaml': 'domain: m\ndescriptors:\n  - key: k\n    rate_limit: {unit: month, requests_per_unit: 1}\n' });
    const s = await startTestService({ configDir: dir, env: { USE_CALENDAR_MONTH_RATE_LIMIT: 'true' }, startMs: Date.UTC(2027, 1, 28, 23, 59, 30) });
    try {
      await s.rls.call({ domain: 'm', descriptors: [{ entries: [{ key: 'k', value: 'v' }] }] });
      const r = await s.rls.call({ domain: 'm', descriptors: [{ entries: [{ key: 'k', value: 'v' }] }] });
      expect([r.overall_code, header(r, 'Retry-After'), String(r.statuses[0]!.duration_until_reset!.seconds)]).toEqual(['OVER_LIMIT', '30', '30']);
    } finally {
      await s.close();
    }
  });
});
