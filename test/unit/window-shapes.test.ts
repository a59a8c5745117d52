import { describe, expect, it } from 'vitest';
import { compileYaml, harness } from '../helpers/decide.js';

// unit_multiplier and calendar from the config to the counters: the window's length, its key and its reset.

const yaml = `
domain: shapes
descriptors:
  - key: tenant
    rate_limits:
      - {unit: minute, unit_multiplier: 5, requests_per_unit: 2, name: per-5-minutes}
      - {unit: minute, requests_per_unit: 100, name: per-minute}
      - {unit: month, calendar: true, requests_per_unit: 1000, name: per-calendar-month}
`;

describe('window shapes from the config', () => {
  it('unit_multiplier: 5 with unit: minute is a 5-minute window, keyed apart from the 1-minute one', async () => {
    const rule = compileYaml(yaml).domains.get('shapes')!.rules[0]!;
    expect(rule.limits.map((l) => [l.windowSeconds, l.windowName, l.calendar])).toEqual([
      [300, 'minute.x5', 0],
      [60, 'minute', 0],
      [30 * 86_400, 'month.cal', 1],
    ]);
    const h = harness(yaml);
    h.clock.set(1_800_000_000_000 - (1_800_000_000_000 % 300_000));
    expect((await h.decide('shapes', [{ tenant: 'a' }])).overLimit).toBe(false);
    h.clock.advance(120_000); // another minute window, the same 5-minute one
    expect((await h.decide('shapes', [{ tenant: 'a' }])).overLimit).toBe(false);
    const third = await h.decide('shapes', [{ tenant: 'a' }]);
    expect([third.overLimit, third.descriptors[0]!.windows[0]!.over]).toEqual([true, true]);
    h.clock.advance(180_000);
    expect((await h.decide('shapes', [{ tenant: 'a' }])).overLimit).toBe(false);
  });

  it("a calendar month's reset is the first of the next month, 00:00 UTC", async () => {
    const h = harness(yaml);
    h.clock.set(Date.UTC(2027, 1, 10, 12));
    const d = await h.decide('shapes', [{ tenant: 'b' }]);
    expect(d.descriptors[0]!.windows[2]!.resetAtMs).toBe(Date.UTC(2027, 2, 1));
  });
});

describe('the ten-year bound on a window', () => {
  const limit = (unit: string, multiplier: number, calendar: boolean): string => `domain: bound
descriptors:
  - key: tenant
    rate_limit: {unit: ${unit}, unit_multiplier: ${multiplier}, requests_per_unit: 1${calendar ? ', calendar: true' : ''}}
`;

  it('counts calendar months and years as such: 121 months pass ten years though 121 × 30 days do not', () => {
    expect(() => compileYaml(limit('month', 120, true))).not.toThrow();
    expect(() => compileYaml(limit('month', 121, true))).toThrow(/121 months is longer than ten years/);
    expect(() => compileYaml(limit('year', 10, true))).not.toThrow();
    expect(() => compileYaml(limit('year', 11, true))).toThrow(/longer than ten years/);
    // Fixed-length months (30 days, as envoyproxy/ratelimit counts them) by their seconds: 121 × 30 days fit.
    expect(() => compileYaml(limit('month', 121, false))).not.toThrow();
    expect(() => compileYaml(limit('day', 3651, false))).toThrow(/longer than ten years/);
  });
});
