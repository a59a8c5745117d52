import { describe, expect, it } from 'vitest';
import { compileSources, configLimits } from '../../src/config/load.js';
import { RLS_CONFIG_TYPE_URL, xdsSources } from '../../src/config/rls-conf.js';
import { DEFAULT_RESPONSES, type ResponseSettings } from '../../src/response/header-policy.js';
import { toWireResponse } from '../../src/response/response.js';
import { encodeConfig } from '../helpers/ads-server.js';
import { harness } from '../helpers/decide.js';
import { egConfigs, LISTENER_DOMAIN, userRequest } from '../helpers/envoy-gateway.js';
import { clientView, envoyXRateLimitHeaders, nameCounts, type StatusLike } from '../helpers/envoy-headers.js';

// What a client behind Envoy Gateway gets: Tollgate's answer to Envoy Gateway's configs, through the model of
// Envoy's rate-limit filter (test/helpers/envoy-headers.ts: ratelimit_headers.cc and ratelimit.cc), with the
// x-ratelimit headers Envoy Gateway turns on for every listener.

/** Envoy's buildDescriptorStatus (test/extensions/filters/common/ratelimit/utils.h): a requests_per_unit of 0
 * sets no current limit. */
const status = (rpu: number, unit: string, name: string, remaining: number, reset: number): StatusLike => ({
  code: 'OK',
  current_limit: rpu === 0 ? null : { name, requests_per_unit: rpu, unit },
  limit_remaining: remaining,
  duration_until_reset: { seconds: reset, nanos: 0 },
});

describe("the model against Envoy's own cases (test/extensions/filters/http/ratelimit/ratelimit_headers_test.cc)", () => {
  it.each([
    ['empty descriptor statuses', [], []],
    [
      'a status with no current limit is ignored',
      [status(0, 'MINUTE', 'first', 2, 3), status(4, 'HOUR', 'second', 5, 6)],
      [
        ['x-ratelimit-limit', '4, 4;w=3600;name="second"'],
        ['x-ratelimit-remaining', '5'],
        ['x-ratelimit-reset', '6'],
      ],
    ],
    [
      'an empty name is not appended',
      [status(1, 'MINUTE', '', 2, 3)],
      [
        ['x-ratelimit-limit', '1, 1;w=60'],
        ['x-ratelimit-remaining', '2'],
        ['x-ratelimit-reset', '3'],
      ],
    ],
    [
      'an unknown unit is left out of the policy, not of the limit',
      [status(1, 'UNKNOWN', 'first', 2, 3), status(4, 'HOUR', 'second', 5, 6)],
      [
        ['x-ratelimit-limit', '1, 4;w=3600;name="second"'],
        ['x-ratelimit-remaining', '2'],
        ['x-ratelimit-reset', '3'],
      ],
    ],
    [
      'the normal case, several statuses',
      [status(1, 'MINUTE', 'first', 2, 3), status(4, 'HOUR', 'second', 5, 6)],
      [
        ['x-ratelimit-limit', '1, 1;w=60;name="first", 4;w=3600;name="second"'],
        ['x-ratelimit-remaining', '2'],
        ['x-ratelimit-reset', '3'],
      ],
    ],
  ] as [string, StatusLike[], [string, string][]][])('%s', (_case, statuses, expected) => {
    expect(envoyXRateLimitHeaders(statuses)).toEqual(expected);
  });
});

describe("behind Envoy Gateway's Envoy (x-ratelimit headers on), Envoy Gateway's configs from xDS", () => {
  const config = compileSources(
    xdsSources(
      egConfigs().map((c) => ({ typeUrl: RLS_CONFIG_TYPE_URL, value: encodeConfig(c as never) })),
      configLimits(4 << 20, false),
    ),
  );
  const xds: ResponseSettings = { ...DEFAULT_RESPONSES, source: 'xds' };
  const user = userRequest('u-1').descriptors[0]!;

  it('one set of rate-limit headers, short, and a 429 with no body and no header of the service', async () => {
    const h = harness(config);
    const views = [];
    for (let i = 0; i < 4; i++) views.push(clientView(toWireResponse(await h.decide(LISTENER_DOMAIN, [user]), xds)));
    for (const v of views) expect(nameCounts(v)).toEqual({ 'x-ratelimit-limit': 1, 'x-ratelimit-remaining': 1, 'x-ratelimit-reset': 1 });
    expect(views.map((v) => v.status)).toEqual([200, 200, 200, 429]);
    expect(views[0]!.headers).toEqual([
      ['x-ratelimit-limit', '3, 3;w=60'],
      ['x-ratelimit-remaining', '2'],
      ['x-ratelimit-reset', '60'],
    ]);
    expect(views[3]!.body).toBe('');
  });

  it("Tollgate's own headers turned on for xDS configs (RESPONSE_HEADERS=on) double them: why they are off by default there", async () => {
    const view = clientView(toWireResponse(await harness(config).decide(LISTENER_DOMAIN, [user]), { ...xds, tollgate: 'on' }));
    expect(nameCounts(view)).toMatchObject({ 'x-ratelimit-limit': 2, 'x-ratelimit-reset': 2 });
    const resets = view.headers.filter(([k]) => k === 'x-ratelimit-reset').map(([, v]) => Number(v));
    expect(resets[0]).toBeGreaterThan(1_000_000_000); // a Unix time beside Envoy's seconds to go
    expect(resets[1]).toBe(60);
  });

  it("LIMIT_RESPONSE_HEADERS_ENABLED=true: envoyproxy/ratelimit's RateLimit-* beside Envoy's, each once, as envoyproxy/ratelimit's own answer", async () => {
    const view = clientView(toWireResponse(await harness(config).decide(LISTENER_DOMAIN, [user]), { ...xds, limitHeaders: true }));
    expect(view.headers).toEqual([
      ['ratelimit-limit', '3'],
      ['ratelimit-remaining', '2'],
      ['ratelimit-reset', '60'],
      ['x-ratelimit-limit', '3, 3;w=60'],
      ['x-ratelimit-remaining', '2'],
      ['x-ratelimit-reset', '60'],
    ]);
  });
});
