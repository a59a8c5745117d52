import { describe, expect, it } from 'vitest';
import { fingerprint } from '../../src/fingerprint.js';
import type { DecisionInput } from '../../src/limiter/plan.js';
import { DecisionLog } from '../../src/observe/decision-log.js';
import { summarize } from '../../src/response/summary.js';
import { inFlightCall } from '../helpers/checks.js';
import { harness } from '../helpers/decide.js';
import { capturingLogger } from '../helpers/service.js';

const YAML = `
domain: api
token_key: token
descriptors:
  - key: category
    value: read
    descriptors:
      - key: token
        rate_limits:
          - {unit: second, requests_per_unit: 2, name: read-per-second}
          - {unit: minute, requests_per_unit: 3, name: read-per-minute}
  - key: category
    value: audit
    shadow_mode: true
    rate_limits:
      - {unit: second, requests_per_unit: 1, name: audit-per-second}
`;

describe('a decision summarised for spans and the decision log', () => {
  it('names the client by fingerprint, the rule and the limit with the longest wait that blocked', async () => {
    const h = harness(YAML);
    const input = (token: string) => ({ category: 'read', token });
    await h.decide('api', [input('tok-a')]);
    await h.decide('api', [input('tok-a')]);
    h.clock.advance(1000);
    const third = await h.decide('api', [input('tok-a')]);
    const s3 = summarize(
      {
        domain: 'api',
        hits: 1,
        descriptors: [
          {
            entries: [
              { key: 'category', value: 'read' },
              { key: 'token', value: 'tok-a' },
            ],
          },
        ],
      },
      third,
    );
    expect(s3).toMatchObject({
      code: 'OK',
      client: fingerprint('tok-a'),
      remaining: 0,
      blocking: undefined,
      tightest: { rule: 'category_read.token', limit: 'read-per-minute' },
    });
    expect(s3.descriptors[0]).toMatchObject({ rule: 'category_read.token', limit: 'read-per-minute', remaining: 0 });
    h.clock.advance(1000);
    const fourth = await h.decide('api', [input('tok-a')]);
    const s4 = summarize({ domain: 'api', hits: 1, descriptors: [{ entries: [{ key: 'token', value: 'tok-a' }] }] }, fourth);
    // Both the second and the minute window could be over; the minute one waits longest.
    expect(s4).toMatchObject({ code: 'OVER_LIMIT', blocking: { rule: 'category_read.token', limit: 'read-per-minute' } });
    expect(s4.retryAfterMs).toBeGreaterThan(1000);
    expect(JSON.stringify(s4)).not.toContain('tok-a');
  });

  it('a shadow descriptor never blocks nor counts as the tightest; an unknown domain is not named', async () => {
    const h = harness(YAML);
    await h.decide('api', [{ category: 'audit' }]);
    const d = await h.decide('api', [{ category: 'audit' }]);
    const s = summarize({ domain: 'api', hits: 1, descriptors: [{ entries: [{ key: 'category', value: 'audit' }] }] }, d);
    expect(s).toMatchObject({ code: 'OK', blocking: undefined, remaining: undefined, client: undefined });
    expect(s.descriptors[0]).toMatchObject({ shadow: true, code: 'OK' });
    const unknown = await h.decide('secret-domain', [{ k: 'v' }]);
    const u = summarize({ domain: 'secret-domain', hits: 1, descriptors: [{ entries: [{ key: 'k', value: 'v' }] }] }, unknown);
    expect(u.domain).toBeUndefined();
    expect(JSON.stringify(u)).not.toContain('secret-domain');
  });
});

describe('what each descriptor did, as the store was told', () => {
  const OPS = `
domain: api
descriptors:
  - key: category
    rate_limits:
      - {unit: minute, requests_per_unit: 5}
  - key: streams
    in_flight: {limit: 2, request_key: request_id}
  - key: open
`;
  const streams = (refund?: boolean) => ({
    entries: [
      { key: 'streams', value: 'acme' },
      { key: 'request_id', value: 'r1' },
    ],
    ...(refund && { refund }),
  });

  it('is each descriptor op in the summary and the decision log: count, check, refund, take, giveBack; none where nothing limits', async () => {
    const h = harness(OPS);
    const { logger, lines } = capturingLogger('info');
    const log = new DecisionLog(logger, { mode: 'all', maxPerSecond: 100 });
    const inputs: DecisionInput[] = [
      { domain: 'api', hits: 1, descriptors: [{ entries: [{ key: 'category', value: 'read' }] }, { entries: [{ key: 'open', value: 'x' }] }] },
      { domain: 'api', hits: 0, descriptors: [{ entries: [{ key: 'category', value: 'read' }] }] },
      { domain: 'api', hits: 1, descriptors: [{ entries: [{ key: 'category', value: 'read' }], refund: true }] },
      { domain: 'api', hits: 1, descriptors: [streams()] },
      { domain: 'api', hits: 1, descriptors: [streams(true)] },
    ];
    for (const input of inputs) log.decided(summarize(input, await h.limiter.decide(input)), undefined);
    const ops = lines()
      .filter((l) => l.msg === 'decision')
      .map((l) => (l.descriptors as { op?: string }[]).map((d) => d.op ?? null));
    expect(ops).toEqual([['count', null], ['check'], ['refund'], ['take'], ['giveBack']]);
  });
});

describe('in-flight slots in the decision log', () => {
  const SLOTS_YAML = `
domain: api
descriptors:
  - key: streams
    in_flight: {limit: 2, lease: 1m, request_key: request_id}
`;
  const call = (id: string, refund?: boolean): DecisionInput => inFlightCall({ domain: 'api', key: 'streams', value: 'acme' }, id, refund);

  it('says what a call did with the slots, the leases it found ended, and a give-back that came late', async () => {
    const h = harness(SLOTS_YAML);
    const { logger, lines } = capturingLogger('info');
    const log = new DecisionLog(logger, { mode: 'all', maxPerSecond: 100 });
    const decide = async (input: DecisionInput) => log.decided(summarize(input, await h.limiter.decide(input)), undefined);
    await decide(call('a'));
    await decide(call('a', true));
    await decide(call('a', true));
    await decide(call('b'));
    h.clock.advance(61_000);
    await decide(call('c'));
    await decide(call('b', true));
    const slots = lines()
      .filter((l) => l.msg === 'decision')
      .map((l) => (l.descriptors as { slots?: string }[])[0]!.slots);
    expect(slots).toEqual(['taken 1', 'returned 1', 'returned 0, late', 'taken 1', 'taken 1, 1 expired', 'returned 0, late']);
  });
});

describe('the decision log bound', () => {
  it('writes at most maxPerSecond lines a second, counts the rest, and says so once the second is over', () => {
    const { logger, lines } = capturingLogger('error');
    let now = 10_000;
    let dropped = 0;
    const log = new DecisionLog(logger, { mode: 'all', maxPerSecond: 3, now: () => now, onDropped: (n) => (dropped += n) });
    const ok = {
      domain: 'api',
      code: 'OK' as const,
      client: undefined,
      source: 'store' as const,
      blocking: undefined,
      remaining: 5,
      tightest: undefined,
      retryAfterMs: 0,
      descriptors: [],
    };
    for (let i = 0; i < 10; i++) log.decided(ok, undefined);
    expect(lines().filter((l) => l.msg === 'decision')).toHaveLength(3);
    expect(dropped).toBe(7);
    now += 1000;
    log.decided(ok, 'abc');
    const all = lines();
    expect(all.filter((l) => l.msg === 'decision')).toHaveLength(4);
    expect(all.find((l) => l.dropped === 7)?.msg).toMatch(/7 lines dropped/);
  });

  it('over: only rejected requests', () => {
    const { logger, lines } = capturingLogger('info');
    const log = new DecisionLog(logger, { mode: 'over', maxPerSecond: 100 });
    const base = { domain: 'api', client: undefined, source: 'store' as const, remaining: 0, tightest: undefined, retryAfterMs: 500, descriptors: [] };
    log.decided({ ...base, code: 'OK', blocking: undefined }, undefined);
    log.decided({ ...base, code: 'OVER_LIMIT', blocking: { rule: 'r', limit: 'l' } }, undefined);
    log.failed('UNAVAILABLE', 'StoreTimeoutError', undefined);
    expect(lines().map((l) => l.code)).toEqual(['OVER_LIMIT']);
  });
});
