import { type Item, parseList } from 'structured-headers';
import { describe, expect, it } from 'vitest';
import { DEFAULT_HEADERS } from '../../src/config/spec.js';
import { fingerprint } from '../../src/fingerprint.js';
import type { Decision } from '../../src/limiter/limiter.js';
import { rateLimitHeaders, retryAfterSeconds } from '../../src/response/headers.js';
import { bindingWindow, reportedWindow } from '../../src/response/pick.js';
import { toWireResponse } from '../../src/response/response.js';
import { Code, type WireHeader } from '../../src/response/wire.js';
import { compileYaml, entries, type Harness, harness, T0 } from '../helpers/decide.js';

// Responses built from real decisions (the Limiter over the in-process store, manual clock).

const rules = `
descriptors:
  - key: client
    rate_limits:
      - {unit: second, requests_per_unit: 2}
      - {unit: hour, requests_per_unit: 5}
  - key: burst
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: tie
    rate_limits:
      - {unit: minute, requests_per_unit: 3}
      - {unit: second, requests_per_unit: 3}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
`;

const CONFIG = compileYaml(
  `domain: api\n${rules}`,
  `domain: tight\nresponse_headers: {window: tightest, limit: X-Quota-Limit, remaining: X-Quota-Remaining, reset: X-Quota-Reset}\n${rules}`,
  `domain: draft\nresponse_headers: draft\n${rules}`,
  `domain: quiet\nresponse_headers: none\n${rules}`,
);

const SECRET = 'Bearer secret-token-7f3a';
const fresh = (): Harness => harness(CONFIG);
const headerMap = (hs: WireHeader[]): Record<string, string> => Object.fromEntries(hs.map((h) => [h.key, h.value]));
const headersOf = (d: Decision): Record<string, string> => headerMap(toWireResponse(d).response_headers_to_add);

async function times(h: Harness, n: number, domain: string, descriptors: Record<string, string>[]): Promise<Decision> {
  let last: Decision | undefined;
  for (let i = 0; i < n; i++) last = await h.decide(domain, descriptors);
  return last!;
}

describe('rate-limit headers by style', () => {
  it('x-ratelimit (default): the longest window, its remaining and its reset as a Unix time', async () => {
    const h = fresh();
    h.clock.advance(250);
    const d = await h.decide('api', [{ client: SECRET }]);
    expect(toWireResponse(d).response_headers_to_add).toEqual([
      { key: 'X-RateLimit-Limit', value: '5' },
      { key: 'X-RateLimit-Remaining', value: '4' },
      { key: 'X-RateLimit-Reset', value: String(T0 / 1000 + 3600) },
    ]);
  });

  it('tightest, with renamed headers: the window with the fewest requests left', async () => {
    const h = fresh();
    expect(headersOf(await h.decide('tight', [{ client: 'c' }]))).toEqual({
      'X-Quota-Limit': '2',
      'X-Quota-Remaining': '1',
      'X-Quota-Reset': String(T0 / 1000 + 1),
    });
  });

  it('tightest: a window over its limit is tighter than any with room, whatever is left in each', async () => {
    const h = fresh();
    // client asks for 6: both its windows are over with 2 and 5 left; burst only checks and has 1 left.
    const d = await h.decide('tight', [
      { entries: entries({ client: 'c' }), hits: 6 },
      { entries: entries({ burst: 'b' }), hits: 0 },
    ]);
    expect(d.descriptors.map((o) => o.over)).toEqual([true, false]);
    expect(headersOf(d)['X-Quota-Limit']).toBe('5');
  });

  it('draft: every window of the reporting descriptor as a policy, and the longest one with seconds to reset', async () => {
    const h = fresh();
    h.clock.advance(250);
    expect(headersOf(await h.decide('draft', [{ client: 'c' }]))).toEqual({
      'RateLimit-Policy': '"draft.client.per_second";q=2;w=1, "draft.client.per_hour";q=5;w=3600',
      RateLimit: '"draft.client.per_hour";r=4;t=3600',
    });
  });

  it('none: no rate-limit headers; a refusal still says when to retry', async () => {
    const h = fresh();
    expect(headersOf(await h.decide('quiet', [{ burst: 'b' }]))).toEqual({});
    expect(headersOf(await h.decide('quiet', [{ burst: 'b' }]))).toEqual({ 'Retry-After': '60', 'content-type': 'application/problem+json' });
  });

  it('longest: on windows of equal length, the one with fewer left; shadow descriptors are never reported', async () => {
    const h = fresh();
    await h.decide('api', [{ client: 'b' }]);
    expect(headersOf(await h.decide('api', [{ client: 'a' }, { client: 'b' }]))['X-RateLimit-Remaining']).toBe('3');
    expect(headersOf(await h.decide('api', [{ trial: 't' }]))).toEqual({});
    expect(headersOf(await h.decide('api', [{ trial: 't2' }, { burst: 'x' }]))['X-RateLimit-Limit']).toBe('1');
  });

  it('reportedWindow names the descriptor that owns the window', async () => {
    const d = await fresh().decide('api', [{ burst: 'x' }, { client: 'c' }]);
    const picked = reportedWindow(d.descriptors, 'longest')!;
    expect(picked.owner).toBe(d.descriptors[1]);
    expect(picked.window.limit.unit).toBe('hour');
    expect(reportedWindow(d.descriptors, 'tightest')!.window.limit.unit).toBe('minute'); // burst: 0 left
  });
});

describe('Retry-After', () => {
  it.each([
    [0, 1],
    [1, 1],
    [999, 1],
    [1000, 1],
    [1001, 2],
    [59_500, 60],
  ])('%i ms → %i s: never 0, which would invite a retry that fails', (ms, s) => {
    expect(retryAfterSeconds(ms)).toBe(s);
  });

  it('covers every blocking window across descriptors, whichever comes first in the request', async () => {
    const h = fresh();
    h.clock.advance(500);
    await times(h, 2, 'api', [{ client: 'c' }]); // its second is full: 500 ms to wait
    await h.decide('api', [{ burst: 'b' }]); // its minute is full: 59.5 s to wait
    const orders: Record<string, string>[][] = [
      [{ client: 'c' }, { burst: 'b' }],
      [{ burst: 'b' }, { client: 'c' }],
    ];
    for (const order of orders) {
      const d = await h.decide('api', order);
      expect(d.retryAfterMs).toBe(59_500);
      expect(headersOf(d)['Retry-After']).toBe('60');
    }
  });

  it('covers both windows of one descriptor over at once', async () => {
    const h = fresh();
    await times(h, 2, 'api', [{ client: 'c' }]);
    h.clock.set(T0 + 1000);
    await times(h, 2, 'api', [{ client: 'c' }]);
    h.clock.set(T0 + 2250);
    await h.decide('api', [{ client: 'c' }]); // the hour is now full (5)
    const d = await h.decide('api', [{ client: 'c' }], 2); // and 2 more do not fit in the second either
    expect(d.descriptors[0]!.windows.map((w) => w.over)).toEqual([true, true]);
    expect(headersOf(d)['Retry-After']).toBe(String(Math.ceil((3_600_000 - 2250) / 1000)));
  });

  it('a shadow window over its limit sets no wait', async () => {
    const h = fresh();
    await h.decide('api', [{ trial: 't' }, { burst: 'b' }]);
    const d = await h.decide('api', [{ trial: 't' }, { burst: 'b' }]);
    expect(d.descriptors.map((o) => o.over)).toEqual([true, true]);
    expect(headersOf(d)['Retry-After']).toBe('60'); // burst's minute, not trial's day
  });
});

describe('statuses: the binding window of each descriptor', () => {
  it('not over: the window with the fewest left', async () => {
    const d = await fresh().decide('api', [{ client: 'c' }, { colour: 'blue' }]);
    const [limited, unmatched] = toWireResponse(d).statuses;
    expect(limited).toEqual({
      code: Code.OK,
      current_limit: { name: '', requests_per_unit: 2, unit: 1 }, // unnamed in the config: no name, as envoyproxy/ratelimit answers
      limit_remaining: 1,
      duration_until_reset: { seconds: 1, nanos: 0 },
    });
    expect(unmatched).toEqual({ code: Code.OK, limit_remaining: 0 });
  });

  it("current_limit.name is the config's name, and only that: a made-up one (domain, rule path) never reaches Envoy", async () => {
    const named = compileYaml(
      'domain: n\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 3, name: per-client}\n' +
        '  - key: b\n    rate_limit: {unit: minute, requests_per_unit: 3}\n',
    );
    const d = await harness(named).decide('n', [{ a: 'x' }, { b: 'y' }]);
    expect(toWireResponse(d).statuses.map((s) => s.current_limit!.name)).toEqual(['per-client', '']);
    expect(d.descriptors[1]!.windows[0]!.limit.name).toBe('n.b.per_minute'); // still the name in metrics and logs
  });

  it('on a tie, the shorter window, which recovers first', async () => {
    const d = await fresh().decide('api', [{ tie: 't' }]);
    expect(bindingWindow(d.descriptors[0]!.windows)!.limit.unit).toBe('second');
  });

  it('over: the over window with the longest wait, though another window has fewer left', async () => {
    const h = fresh();
    await times(h, 2, 'api', [{ client: 'c' }]);
    h.clock.set(T0 + 1000);
    await times(h, 3, 'api', [{ client: 'c' }]); // hour 4 of 5 used, this second's 2 full
    h.clock.set(T0 + 1500);
    const d = await h.decide('api', [{ client: 'c' }], 2); // second over (0 left), hour over (1 left)
    const status = toWireResponse(d).statuses[0]!;
    expect(status.code).toBe(Code.OVER_LIMIT);
    expect(status.current_limit).toEqual({ name: '', requests_per_unit: 5, unit: 3 }); // the hour
    // OVER_LIMIT: when the request fits, in the whole seconds of Retry-After (Envoy 1.40 writes its own from them).
    expect(status.duration_until_reset).toEqual({ seconds: 3599, nanos: 0 });
  });
});

describe('the 429 problem body', () => {
  it('names the limit with the longest wait and the wait itself, never the token', async () => {
    const h = fresh();
    h.clock.advance(500);
    await times(h, 2, 'api', [{ client: SECRET }]);
    await h.decide('api', [{ burst: SECRET }]);
    await h.decide('api', [{ trial: SECRET }]); // over too, but shadow: its day-long wait is no one's business
    const response = toWireResponse(await h.decide('api', [{ client: SECRET }, { burst: SECRET }, { trial: SECRET }]));
    const text = response.raw_body!.toString();
    expect(JSON.parse(text)).toEqual({
      type: 'https://iana.org/assignments/http-problem-types#quota-exceeded',
      title: 'Quota Exceeded',
      status: 429,
      detail: 'Rate limit exceeded: 1 requests per minute (api.burst.per_minute). Retry after 60 s.',
      // Every blocking limit of every enforced descriptor; the shadow one is nobody's business.
      'violated-policies': ['api.client.per_second', 'api.burst.per_minute'],
      limit: 'api.burst.per_minute',
      retry_after: 60,
    });
    const everything = text + JSON.stringify(response.response_headers_to_add) + JSON.stringify(response.statuses);
    for (const leak of ['secret', fingerprint(SECRET), fingerprint(SECRET).slice(0, 8)]) expect(everything).not.toContain(leak);
  });

  it('is only there when the request is refused', async () => {
    const response = toWireResponse(await fresh().decide('api', [{ client: 'c' }]));
    expect(response.overall_code).toBe(Code.OK);
    expect(response.raw_body).toBeUndefined();
  });

  it('headers come from the domain spec given, even for a decision made elsewhere', async () => {
    const d = await fresh().decide('api', [{ client: 'c' }]);
    expect(rateLimitHeaders(d, { ...DEFAULT_HEADERS, style: 'none' })).toEqual([]);
  });
});

describe('a token bucket in the response (10 per second, burst 20)', () => {
  const BUCKET = compileYaml(
    `domain: tb\ndescriptors:\n  - key: b\n    algorithm: token_bucket\n    rate_limit: {unit: second, requests_per_unit: 10, burst: 20, name: tb}\n`,
  );

  it('X-RateLimit-Limit is the burst, Remaining whole tokens, Reset when the bucket is full again', async () => {
    const h = harness(BUCKET);
    for (let i = 0; i < 4; i++) await h.decide('tb', [{ b: 'x' }]);
    h.clock.set(T0 + 150);
    const d = await h.decide('tb', [{ b: 'x' }]);
    // Debt: 4 × 100 ms − 150 ms + 100 ms = 350 ms: full at T0 + 500, 16 tokens left.
    expect(headersOf(d)).toEqual({ 'X-RateLimit-Limit': '20', 'X-RateLimit-Remaining': '16', 'X-RateLimit-Reset': String(Math.ceil((T0 + 500) / 1000)) });
    const status = toWireResponse(d).statuses[0]!;
    expect(status).toMatchObject({
      code: Code.OK,
      limit_remaining: 16,
      current_limit: { requests_per_unit: 10 },
      duration_until_reset: { seconds: 0, nanos: 350_000_000 },
    });
  });

  it('over limit: Retry-After is at least 1 s, duration_until_reset is when the request would fit', async () => {
    const h = harness(BUCKET);
    for (let i = 0; i < 20; i++) await h.decide('tb', [{ b: 'x' }]);
    const d = await h.decide('tb', [{ b: 'x' }]);
    const res = toWireResponse(d);
    expect(headerMap(res.response_headers_to_add)).toMatchObject({ 'X-RateLimit-Remaining': '0', 'Retry-After': '1' });
    // 0.1 s to the next token: said as Retry-After says it, a whole second at least (Envoy 1.40 reads it so).
    expect(res.statuses[0]).toMatchObject({ code: Code.OVER_LIMIT, duration_until_reset: { seconds: 1, nanos: 0 } });
    const big = toWireResponse(await h.decide('tb', [{ b: 'y' }], 45));
    // 45 tokens never fit a bucket of 20: the wait offered is until it is full (here it already is: 1 s).
    expect(headerMap(big.response_headers_to_add)['Retry-After']).toBe('1');
    expect(big.overall_code).toBe(Code.OVER_LIMIT);
  });
});

describe('draft headers (draft-ietf-httpapi-ratelimit-headers-11), read with a Structured Field parser', () => {
  const DRAFT = compileYaml(
    `domain: d\nresponse_headers: draft\ndescriptors:\n  - key: b\n    rate_limits:\n` +
      `      - {unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 20, name: 'tb "quoted" \\ name'}\n` +
      `      - {unit: hour, requests_per_unit: 1000, name: hourly}\n` +
      `  - key: w\n    rate_limit: {unit: minute, requests_per_unit: 5, name: per-minute}\n`,
  );
  const items = (value: string): { name: unknown; params: Record<string, unknown> }[] =>
    parseList(value).map((m) => ({ name: (m as Item)[0], params: Object.fromEntries((m as Item)[1]) }));

  it('RateLimit-Policy: every limit a String item with q and w; a bucket adds tollgate-burst', async () => {
    const h = harness(DRAFT);
    const hs = headersOf(await h.decide('d', [{ b: 'x' }]));
    expect(items(hs['RateLimit-Policy']!)).toEqual([
      { name: 'tb "quoted" \\ name', params: { q: 10, w: 1, 'tollgate-burst': 20 } },
      { name: 'hourly', params: { q: 1000, w: 3600 } },
    ]);
    expect(items(hs.RateLimit!)).toEqual([{ name: 'hourly', params: { r: 999, t: 3600 } }]);
  });

  it('RateLimit of a bucket: r whole tokens, t the seconds until the next token; a full bucket has no t', async () => {
    const h = harness(
      compileYaml(
        `domain: d\nresponse_headers: {style: draft, window: tightest}\ndescriptors:\n  - key: b\n    rate_limit: {unit: minute, requests_per_unit: ` +
          `2, algorithm: token_bucket, burst: 4, name: slow}\n`,
      ),
    );
    const first = headersOf(await h.decide('d', [{ b: 'x' }]));
    // 3 tokens left; the one taken is back in 30 s (2 a minute).
    expect(items(first.RateLimit!)).toEqual([{ name: 'slow', params: { r: 3, t: 30 } }]);
    await h.decide('d', [{ b: 'x' }]);
    h.clock.advance(10_000);
    // 2 left; full again in 50 s, the next token in 20 s.
    expect(items(headersOf(await h.decide('d', [{ b: 'x' }], 0)).RateLimit!)).toEqual([{ name: 'slow', params: { r: 2, t: 20 } }]);
    h.clock.advance(60_000);
    expect(items(headersOf(await h.decide('d', [{ b: 'x' }], 0)).RateLimit!)).toEqual([{ name: 'slow', params: { r: 4 } }]);
  });

  it('a window keeps t, the seconds until it resets', async () => {
    const h = harness(DRAFT);
    h.clock.advance(15_500);
    expect(items(headersOf(await h.decide('d', [{ w: 'x' }])).RateLimit!)).toEqual([{ name: 'per-minute', params: { r: 4, t: 45 } }]);
  });
});
