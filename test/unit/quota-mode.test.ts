import { describe, expect, it } from 'vitest';
import { compileSources } from '../../src/config/load.js';
import { explain } from '../../src/limiter/explain.js';
import { noTiers } from '../../src/limiter/plan.js';
import { toWireResponse } from '../../src/response/response.js';
import { harness } from '../helpers/decide.js';

/** quota_mode's edges, as envoyproxy/ratelimit's src/service/ratelimit.go decides them (review of issue 21). */
const YAML = `
domain: q
descriptors:
  - key: soft_a
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, name: soft-a}
  - key: soft_b
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1, name: soft-b}
  - key: hard
    rate_limit: {unit: second, requests_per_unit: 1, name: hard}
  - key: replaced_soft
    quota_mode: true
    rate_limit: {unit: day, requests_per_unit: 5, name: replaced-soft}
  - key: replacer
    rate_limit: {unit: day, requests_per_unit: 50, name: replacer, replaces: [{name: replaced-soft}]}
`;

describe('quota mode', () => {
  it('a quota_mode rule whose limits all are replaced is no quota descriptor (its limit is nil there): the others can still block', async () => {
    const h = harness(YAML);
    const req: Record<string, string>[] = [{ soft_a: 'x' }, { replaced_soft: 'x' }, { replacer: 'x' }];
    expect((await h.decide('q', req)).overLimit).toBe(false);
    expect((await h.decide('q', req)).overLimit).toBe(true); // soft_a, the one quota descriptor, is over
  });

  it('under QUOTA_MODE the same replaced descriptor passes as a quota descriptor, so the request passes', async () => {
    const h = harness(YAML, { globalQuota: true });
    const req: Record<string, string>[] = [{ soft_a: 'x' }, { replaced_soft: 'x' }, { replacer: 'x' }];
    await h.decide('q', req);
    expect((await h.decide('q', req)).overLimit).toBe(false);
  });

  it('Retry-After and the 429 body name only what blocked: a normal limit, not a quota limit that could not', async () => {
    const h = harness(YAML);
    const req: Record<string, string>[] = [{ soft_a: 'y' }, { soft_b: 'y' }, { hard: 'y' }];
    await h.decide('q', req);
    h.clock.advance(1000);
    await h.decide('q', [{ hard: 'y' }]); // hard is full for this second; soft_a and soft_b are full too
    const d = await h.decide('q', req);
    expect(d.overLimit).toBe(true);
    // hard frees up in < 1 s; every quota descriptor is over too, so the request also waits for the first of
    // them to have room: soft_a's minute, not soft_b's hour.
    expect(d.retryAfterMs).toBeLessThanOrEqual(60_000);
    expect(d.retryAfterMs).toBeGreaterThan(50_000);
    const body = JSON.parse(toWireResponse(d).raw_body!.toString()) as { 'violated-policies': string[] };
    expect(body['violated-policies']).toEqual(['hard']);
  });

  it('a normal limit alone over, quota descriptors with room: Retry-After is the normal one', async () => {
    const h = harness(YAML);
    const req: Record<string, string>[] = [{ soft_a: 'z' }, { hard: 'z' }];
    expect((await h.decide('q', [{ hard: 'z' }])).overLimit).toBe(false);
    const d = await h.decide('q', req);
    expect(d.overLimit).toBe(true);
    expect(d.retryAfterMs).toBeLessThanOrEqual(1000);
  });

  it('explain: a burst is not stopped by quota limits when one quota descriptor always passes', async () => {
    const config = compileSources([{ file: 'q.yaml', text: YAML.replace('name: soft-b}', 'name: soft-b}\n    shadow_mode: true') }]);
    const e = await explain(config, noTiers, {
      domain: 'q',
      hits: 1,
      descriptors: [{ entries: [{ key: 'soft_a', value: 'x' }] }, { entries: [{ key: 'soft_b', value: 'x' }] }],
    });
    expect(e.firstToReject).toBeNull();
  });
});
