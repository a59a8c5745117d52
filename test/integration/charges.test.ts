import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfigDir } from '../../src/config/load.js';
import { MemoryTierStore } from '../../src/control/tier-store.js';
import { fingerprint } from '../../src/fingerprint.js';
import { explain } from '../../src/limiter/explain.js';
import { noTiers } from '../../src/limiter/plan.js';
import { metric, scrape } from '../helpers/metrics.js';
import { type RedisServer, startRedis } from '../helpers/redis.js';
import { capturingLogger, configDir, header, type RlsRequest, startTestService, type TestService } from '../helpers/service.js';
import { within } from '../helpers/time.js';

// Costs known only when the response is done (issue 37), through the real gRPC server: Envoy's request-phase
// check (hits_addend 0) and its stream-done charge, reservations by request id, budgets past 2^32, and
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false. The shipped example config (examples/llm-budgets.yaml).

const dir = configDir({ 'llm.yaml': readFileSync('examples/llm-budgets.yaml', 'utf8') });
const month = (tenant: string, hits: number): RlsRequest => ({
  domain: 'llm',
  descriptors: [{ entries: [{ key: 'tenant', value: tenant }], hits_addend: { value: hits } }],
});
const hour = (tenant: string, id: string, hits: number): RlsRequest => ({
  domain: 'llm',
  descriptors: [
    {
      entries: [
        { key: 'tenant', value: tenant },
        { key: 'model', value: 'gpt' },
        { key: 'request_id', value: id },
      ],
      hits_addend: { value: hits },
    },
  ],
});

describe('charges behind the service: two replicas on one Redis', () => {
  let redis: RedisServer;
  let a: TestService;
  let b: TestService;
  beforeAll(async () => {
    redis = await startRedis();
    const args = ['--store', 'redis', '--redis-url', redis.url, '--redis-timeout-ms', '1000'];
    [a, b] = await Promise.all([startTestService({ configDir: dir, args }), startTestService({ configDir: dir, args })]);
  });
  afterAll(async () => {
    await Promise.all([a?.close(), b?.close()]);
    await redis?.stop();
  });

  it("the new user's sequence across replicas: check, charge, a charge past the budget counted, the check refused", async () => {
    const t = `t-${Math.random()}`;
    // 50,000,000 tokens a month; the test spends them in two charges of 30,000,000.
    const check = await a.rls.call(month(t, 0));
    expect([check.overall_code, header(check, 'X-RateLimit-Remaining')]).toEqual(['OK', '50000000']);
    const first = await b.rls.call(month(t, 30_000_000));
    expect([first.overall_code, header(first, 'X-RateLimit-Remaining')]).toEqual(['OK', '20000000']);
    const past = await a.rls.call(month(t, 30_000_000));
    // Counted in full although past the budget; the answer says so: OVER_LIMIT, nothing left.
    expect([past.overall_code, past.statuses[0]!.limit_remaining, header(past, 'X-RateLimit-Remaining')]).toEqual(['OVER_LIMIT', 0, '0']);
    const refused = await b.rls.call(month(t, 0));
    expect(refused.overall_code).toBe('OVER_LIMIT');
    const { series } = await scrape(a.service.httpPort);
    expect(metric(series, 'tollgate_charged_hits_total', { domain: 'llm', rule: 'tenant' })).toBeGreaterThanOrEqual(30_000_000);
  });

  it('a reservation made on one replica is settled on the other; a refused one settles to nothing', async () => {
    const t = `t-${Math.random()}`;
    // 1,000,000 tokens an hour: a reservation of 800,000 fits, a second does not.
    expect((await a.rls.call(hour(t, 'r1', 800_000))).overall_code).toBe('OK');
    const second = await b.rls.call(hour(t, 'r2', 800_000));
    expect([second.overall_code, header(second, 'X-RateLimit-Remaining')]).toEqual(['OVER_LIMIT', '200000']);
    // r1 cost 300,000 (500,000 given back); r2 was refused, so what Envoy sends at its stream's end is not counted.
    expect(header(await b.rls.call(hour(t, 'r1', 300_000)), 'X-RateLimit-Remaining')).toBe('700000');
    expect(header(await a.rls.call(hour(t, 'r2', 50_000)), 'X-RateLimit-Remaining')).toBe('700000');
    const { series } = await scrape(b.service.httpPort);
    expect(metric(series, 'tollgate_reservations_total', { domain: 'llm', rule: 'tenant.model', event: 'settled' })).toBe(1);
    // The request id reaches Redis as a fingerprint only.
    const keys = await redis.cli('--scan', '--pattern', '*rsv*');
    expect(keys).not.toContain('r1');
    expect(await redis.cli('HEXISTS', keys.split('\n').find((k) => k.endsWith(':rsv'))!, fingerprint('r1'))).toBe('1');
  });
});

/** Envoy's two calls for one request of the shipped example (envoy/envoy-llm.yaml): the request phase
 * reserves an estimate of 2,000 on the month and the hour; the stream's end settles both to its tokens. */
const requestPhase = (tenant: string, id: string): RlsRequest => ({
  domain: 'llm',
  descriptors: [
    {
      entries: [
        { key: 'tenant', value: tenant },
        { key: 'request_id', value: id },
      ],
      hits_addend: { value: 2000 },
    },
    {
      entries: [
        { key: 'tenant', value: tenant },
        { key: 'model', value: 'gpt' },
        { key: 'request_id', value: id },
      ],
      hits_addend: { value: 2000 },
    },
  ],
});
const streamDone = (tenant: string, id: string, tokens: number): RlsRequest => ({
  domain: 'llm',
  descriptors: [
    {
      entries: [
        { key: 'tenant', value: tenant },
        { key: 'settle_id', value: id },
      ],
      hits_addend: { value: tokens },
    },
    {
      entries: [
        { key: 'tenant', value: tenant },
        { key: 'model', value: 'gpt' },
        { key: 'settle_id', value: id },
      ],
      hits_addend: { value: tokens },
    },
  ],
});
const remaining = async (s: TestService, req: RlsRequest): Promise<number> => (await s.rls.call(req)).statuses[0]!.limit_remaining;

describe.each(['memory', 'redis'])('the shipped example under 50 concurrent streams: %s', (store) => {
  let redis: RedisServer | undefined;
  let a: TestService;
  let b: TestService;
  beforeAll(async () => {
    if (store === 'redis') {
      redis = await startRedis();
      const args = ['--store', 'redis', '--redis-url', redis.url, '--redis-timeout-ms', '1000'];
      [a, b] = await Promise.all([startTestService({ configDir: dir, args }), startTestService({ configDir: dir, args })]);
    } else {
      a = b = await startTestService({ configDir: dir });
    }
  });
  afterAll(async () => {
    await Promise.all([a?.close(), b === a ? undefined : b?.close()]);
    await redis?.stop();
  });

  it('5,000 tokens left in the month: 2 of 50 are admitted, and the month ends over by no more than their excess', async () => {
    const t = `t-${Math.random()}`;
    await a.rls.call(month(t, 50_000_000 - 5000));
    const answers = await Promise.all(Array.from({ length: 50 }, (_, i) => (i % 2 ? a : b).rls.call(requestPhase(t, `r-${i}`))));
    const admitted = answers.flatMap((r, i) => (r.overall_code === 'OK' ? [i] : []));
    expect(admitted).toHaveLength(2);
    // Each admitted response cost 2,400 (400 past its estimate); the refused ones' ends count nothing.
    await Promise.all(Array.from({ length: 50 }, (_, i) => (i % 2 ? b : a).rls.call(streamDone(t, `r-${i}`, admitted.includes(i) ? 2400 : 3000))));
    expect(await remaining(a, month(t, 0))).toBe(5000 - 2 * 2400);
    expect(await remaining(b, hour(t, 'none', 0))).toBe(1_000_000 - 2 * 2400);
  });

  it('the hour never overshoots by more than the excess over estimates; its 429 says the hour, in tokens', async () => {
    const t = `t-${Math.random()}`;
    const answers = await Promise.all(Array.from({ length: 600 }, (_, i) => (i % 2 ? a : b).rls.call(requestPhase(t, `h-${i}`))));
    const admitted = answers.flatMap((r, i) => (r.overall_code === 'OK' ? [i] : []));
    expect(admitted).toHaveLength(500); // 1,000,000 an hour holds 500 estimates of 2,000
    const refused = answers.find((r) => r.overall_code === 'OVER_LIMIT')!;
    expect(header(refused, 'X-RateLimit-Limit')).toBe('1000000'); // the tightest window: the hour, not the month
    expect(JSON.parse(refused.raw_body.toString()).detail).toMatch(/^Rate limit exceeded: 1000000 tokens per hour \(tokens-per-hour\)/);
    await Promise.all(admitted.map((i) => (i % 2 ? b : a).rls.call(streamDone(t, `h-${i}`, 2100))));
    const check = await a.rls.call(hour(t, 'none', 0));
    expect([check.overall_code, header(check, 'X-RateLimit-Remaining')]).toEqual(['OVER_LIMIT', '0']);
    expect(await remaining(b, month(t, 0))).toBe(50_000_000 - 500 * 2100);
  });

  it('a stream whose request phase never reached Tollgate is charged in full once; the answer is not a 429 in metrics', async () => {
    const t = `t-${Math.random()}`;
    await a.rls.call(streamDone(t, 'lost', 5000));
    await b.rls.call(streamDone(t, 'lost', 5000)); // a replay counts nothing
    expect(await remaining(a, month(t, 0))).toBe(50_000_000 - 5000);
    const { series } = await scrape(a.service.httpPort);
    expect(metric(series, 'tollgate_reservations_total', { domain: 'llm', rule: 'tenant', event: 'unreserved' })).toBe(1);
    expect(metric(series, 'tollgate_requests_total', { domain: 'llm', result: 'stream_end' })).toBeGreaterThanOrEqual(1);
  });
});

describe('stream-end settlements while Redis is frozen', () => {
  it.each(['allow', 'deny'])('are kept and reach the budget once when it answers (policy %s), none twice', async (policy) => {
    const redis = await startRedis();
    const args = ['--store', 'redis', '--redis-url', redis.url, '--redis-timeout-ms', '100', '--redis-failure', policy];
    const s = await startTestService({ configDir: dir, args });
    try {
      const t = `t-${Math.random()}`;
      for (let i = 0; i < 5; i++) expect((await s.rls.call(requestPhase(t, `f-${i}`))).overall_code).toBe('OK');
      redis.signal('SIGSTOP');
      // Envoy's stream-end calls during the freeze: each times out (the answer is ignored by Envoy anyway).
      await Promise.allSettled(Array.from({ length: 5 }, (_, i) => s.rls.call(streamDone(t, `f-${i}`, 1000))));
      expect(metric((await scrape(s.service.httpPort)).series, 'tollgate_settlements_waiting')).toBe(5);
      redis.signal('SIGCONT');
      await within(10_000, async () => metric((await scrape(s.service.httpPort)).series, 'tollgate_settlements_waiting') === 0, 'the queue sent');
      // Each of the 5 settled to 1,000 exactly once, whether the woken Redis ran the first call or the retry did.
      expect(await remaining(s, month(t, 0))).toBe(50_000_000 - 5000);
      expect(await remaining(s, hour(t, 'none', 0))).toBe(1_000_000 - 5000);
    } finally {
      redis.signal('SIGCONT');
      await s.close();
      await redis.stop();
    }
  });
});

describe('the decision log', () => {
  it("shows a charge, the debt past the budget and a reservation's event, by descriptor", async () => {
    const log = capturingLogger();
    const s = await startTestService({ configDir: dir, args: ['--decision-log', 'all'], logger: log.logger });
    try {
      await s.rls.call(month('t-log', 60_000_000));
      await s.rls.call(hour('t-log', 'r-log', 100));
      const lines = log.lines().filter((l) => l.msg === 'decision');
      const descriptors = lines.map((l) => (l.descriptors as Record<string, unknown>[])[0]);
      expect(descriptors[0]).toMatchObject({ rule: 'tenant', code: 'OVER_LIMIT', charged: 60_000_000, debt: 10_000_000 });
      expect(descriptors[1]).toMatchObject({ rule: 'tenant.model', code: 'OK', reservation: 'made' });
      expect(JSON.stringify(lines)).not.toContain('r-log');
    } finally {
      await s.close();
    }
  });
});

describe('a long request id', () => {
  // Refused (INVALID_ARGUMENT) before issue 61: an Envoy with failure_mode_deny: false let that request through
  // uncharged, so whoever set the header spent nothing.
  it('is taken by its fingerprint: the request is charged, and the id is never echoed', async () => {
    const s = await startTestService({ configDir: dir });
    try {
      const id = `s3cr3t-${'x'.repeat(300)}`;
      const answer = await s.rls.call(hour('t-long', id, 10));
      expect(answer.overall_code).toBe('OK');
      expect(JSON.stringify(answer)).not.toContain('s3cr3t');
      expect(header(await s.rls.call(hour('t-long', 'short', 0)), 'X-RateLimit-Remaining')).toBe('999990');
    } finally {
      await s.close();
    }
  });
});

describe('a budget past 2^32, and STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false', () => {
  it("an enterprise tenant's 10,000,000,000 a month: the answer's uint32 fields clamp, the headers are exact", async () => {
    const tiers = new MemoryTierStore();
    await tiers.assign({ fingerprint: fingerprint('big'), tier: 'enterprise', assignedAt: new Date().toISOString(), by: 'test' });
    const s = await startTestService({ configDir: dir, tiers });
    try {
      const r = await s.rls.call(month('big', 1));
      expect([r.statuses[0]!.current_limit!.requests_per_unit, r.statuses[0]!.limit_remaining]).toEqual([4294967295, 4294967295]);
      expect([header(r, 'X-RateLimit-Limit'), header(r, 'X-RateLimit-Remaining')]).toEqual(['10000000000', '9999999999']);
    } finally {
      await s.close();
    }
  });

  it('false counts every hit past the limit, as envoyproxy/ratelimit does by default; unset, a refused request counts nothing', async () => {
    const counts = async (env: NodeJS.ProcessEnv): Promise<string[]> => {
      const s = await startTestService({ env });
      try {
        const req = {
          domain: 'property-api',
          descriptors: [
            {
              entries: [
                { key: 'category', value: 'reports' },
                { key: 'token', value: 'Bearer x' },
              ],
            },
          ],
        };
        const codes = [];
        for (let i = 0; i < 4; i++) codes.push((await s.rls.call(req)).overall_code);
        // A second later the per-second window is empty again; the hour says what was counted.
        s.clock.advance(1000);
        const r = await s.rls.call(req);
        return [...codes, header(r, 'X-RateLimit-Remaining')!];
      } finally {
        await s.close();
      }
    };
    expect(await counts({ STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: 'false' })).toEqual(['OK', 'OK', 'OVER_LIMIT', 'OVER_LIMIT', '195']);
    expect(await counts({})).toEqual(['OK', 'OK', 'OVER_LIMIT', 'OVER_LIMIT', '197']);
  });
});

describe('explain', () => {
  it("shows a rule's charge mode and reservation key, and whether the request names a reservation (by fingerprint only)", async () => {
    const config = loadConfigDir(dir);
    const [named] = (await explain(config, noTiers, { domain: 'llm', hits: 1, descriptors: [{ entries: hour('t', 'secret-id', 5).descriptors[0]!.entries }] }))
      .descriptors;
    expect([named!.rule?.id, named!.rule?.charge, named!.rule?.reservationKey, named!.reservation]).toEqual(['tenant.model', true, 'request_id', true]);
    expect(JSON.stringify(named)).not.toContain('secret-id');
    const [plain] = (await explain(config, noTiers, { domain: 'llm', hits: 1, descriptors: [{ entries: month('t', 0).descriptors[0]!.entries, hits: 0 }] }))
      .descriptors;
    expect([plain!.rule?.charge, plain!.reservation]).toEqual([true, undefined]);
  });
});
