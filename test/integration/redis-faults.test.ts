import { status } from '@grpc/grpc-js';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { jsonOf } from '../helpers/json.js';
import { type RedisServer, startRedis } from '../helpers/redis.js';
import { header, property, type RlsRequest, startTestService, type TestService } from '../helpers/service.js';
import { inOneSecond, within } from '../helpers/time.js';

// Redis crashes and freezes under load. Every call must get an answer before the client's deadline (no
// call waits on a dead Redis), as the failure policy says; counting goes back to Redis once it returns.

const DEADLINE_MS = 1000;
const unhandled: unknown[] = [];
const onUnhandled = (reason: unknown): void => {
  unhandled.push(reason);
};
process.on('unhandledRejection', onUnhandled);
afterAll(() => {
  process.off('unhandledRejection', onUnhandled);
  expect(unhandled).toEqual([]);
});

type Outcome = string; // OK | OVER_LIMIT | error <grpc code>

async function call(t: TestService, req: RlsRequest): Promise<{ outcome: Outcome; retryAfter?: string }> {
  try {
    const r = await t.rls.call(req, DEADLINE_MS);
    return { outcome: r.overall_code, retryAfter: header(r, 'Retry-After') };
  } catch (err) {
    return { outcome: `error ${(err as { code: number }).code}` };
  }
}

/** Background traffic over many tokens, bounded in time, until stop() is called; count() says how many calls
 * were answered so far. */
function load(t: TestService): { count: () => number; stop: () => Promise<Outcome[]> } {
  const outcomes: Outcome[] = [];
  let running = true;
  const workers = Array.from({ length: 4 }, async (_, w) => {
    for (let i = 0; running && i < 5000; i++) outcomes.push((await call(t, property('read', `Bearer load-${w}-${i % 50}`))).outcome);
  });
  return {
    count: () => outcomes.length,
    stop: async () => {
      running = false;
      await Promise.all(workers);
      return outcomes;
    },
  };
}

async function sequence(t: TestService, token: string, n: number): Promise<{ outcome: Outcome; retryAfter?: string }[]> {
  const out = [];
  for (let i = 0; i < n; i++) out.push(await call(t, property('read', token)));
  return out;
}

const UNAVAILABLE = `error ${status.UNAVAILABLE}`;
const allowedDuringOutage: Record<string, Outcome[]> = {
  allow: ['OK', 'OVER_LIMIT', UNAVAILABLE],
  deny: ['OK', 'OVER_LIMIT'],
  local: ['OK', 'OVER_LIMIT'],
};

/** A fresh Redis and a Tollgate on it (25 ms bound, the given policy) for each test of the block. */
function withRedis(policy: string): { redis: RedisServer; t: TestService } {
  const s = {} as { redis: RedisServer; t: TestService };
  beforeEach(async () => {
    s.redis = await startRedis();
    s.t = await startTestService({
      realClock: true,
      args: ['--store', 'redis', '--redis-url', s.redis.url, '--redis-timeout-ms', '25', '--redis-failure', policy],
    });
  });
  afterEach(async () => {
    s.redis.signal('SIGCONT');
    await s.t.close();
    await s.redis.stop();
  });
  return s;
}

describe.each(['allow', 'deny', 'local'])('Redis killed under load, policy %s', (policy) => {
  const s = withRedis(policy);

  it('answers every call per policy, then counts in Redis again once it is back', async () => {
    expect((await call(s.t, property('read', 'Bearer before'))).outcome).toBe('OK');
    const traffic = load(s.t);
    await within(5000, () => traffic.count() >= 20); // the crash lands under load
    s.redis.signal('SIGKILL');
    await within(10_000, () => s.t.service.store.health().degraded);
    const ready = await fetch(`http://127.0.0.1:${s.t.service.httpPort}/readyz`);
    expect(ready.status).toBe(policy === 'deny' ? 503 : 200);
    expect((await jsonOf(ready)).reason).toMatch(new RegExp(`store degraded .*policy ${policy}`));
    // A sleep that is the subject: the 12 calls below must fall in one second's window. On a loaded machine
    // they may not: then the sequence is sent again, with a new token, from the next second (at most 3 times).
    const during = await inOneSecond((attempt) => sequence(s.t, `Bearer during-${policy}-${attempt}`, 12));
    const background = await traffic.stop();

    expect(background.length).toBeGreaterThan(0);
    expect(background.filter((o) => !allowedDuringOutage[policy]!.includes(o))).toEqual([]);
    if (policy === 'allow') expect(during.map((d) => d.outcome)).toEqual(Array(12).fill(UNAVAILABLE));
    if (policy === 'deny') {
      expect(during.map((d) => d.outcome)).toEqual(Array(12).fill('OVER_LIMIT'));
      expect(during[0]!.retryAfter).toBe('1');
    }
    if (policy === 'local') expect(during.map((d) => d.outcome)).toEqual([...Array(10).fill('OK'), 'OVER_LIMIT', 'OVER_LIMIT']);

    await s.redis.restart();
    await within(10_000, () => !s.t.service.store.health().degraded);
    expect((await fetch(`http://127.0.0.1:${s.t.service.httpPort}/readyz`)).status).toBe(200);
    expect((await call(s.t, property('read', 'Bearer after'))).outcome).toBe('OK');
    expect(await s.redis.cli('--scan', '--pattern', 'tollgate:*')).not.toBe('');
  });
});

describe.each(['allow', 'local'])('Redis frozen (SIGSTOP), policy %s', (policy) => {
  const s = withRedis(policy);

  it('answers within the bound while frozen and resumes counting after SIGCONT', async () => {
    expect((await call(s.t, property('read', 'Bearer warm'))).outcome).toBe('OK');
    const traffic = load(s.t);
    await within(5000, () => traffic.count() >= 20); // the freeze lands under load
    s.redis.signal('SIGSTOP');
    await within(5000, () => s.t.service.store.health().degraded);
    const frozen = await sequence(s.t, `Bearer frozen-${policy}`, 5);
    const background = await traffic.stop();
    expect(s.t.service.store.health()).toMatchObject({ degraded: true, reason: 'no answer within 25 ms' });
    expect(frozen.map((f) => f.outcome)).toEqual(Array(5).fill(policy === 'allow' ? UNAVAILABLE : 'OK'));
    expect(background.filter((o) => !allowedDuringOutage[policy]!.includes(o))).toEqual([]);

    s.redis.signal('SIGCONT');
    await within(10_000, () => !s.t.service.store.health().degraded);
    const token = `Bearer thawed-${policy}`;
    expect((await call(s.t, property('read', token))).outcome).toBe('OK');
    const keys = await s.redis.cli('--scan', '--pattern', 'tollgate:v2:property-api:category_read.token:*');
    expect(keys.split('\n').length).toBeGreaterThanOrEqual(2);
  });
});
