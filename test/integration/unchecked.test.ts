import http2 from 'node:http2';
import { status } from '@grpc/grpc-js';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { UNCHECKED_REASONS } from '../../src/metrics/metrics.js';
import { encodeRequest, frame } from '../adversarial/grpc-cases.js';
import { metric, scrape } from '../helpers/metrics.js';
import { type RedisServer, startRedis } from '../helpers/redis.js';
import { property, startTestService, type TestService } from '../helpers/service.js';
import { within } from '../helpers/time.js';

// What a platform team alerts on when Tollgate cannot decide (deploy/prometheus/rules): every call answered
// without a decision is counted with its reason, /readyz follows READY_REQUIRES_STORE, and Redis's memory and
// evictions are read from Redis itself at scrape time. A real Redis on a free port, a real gRPC client.

let redis: RedisServer | undefined;
let t: TestService | undefined;
afterEach(async () => {
  redis?.signal('SIGCONT');
  await t?.close();
  await redis?.stop();
  t = redis = undefined;
});

async function withRedis(args: string[], redisArgs: string[] = []): Promise<{ redis: RedisServer; t: TestService }> {
  redis = await startRedis(redisArgs);
  t = await startTestService({ realClock: true, args: ['--store', 'redis', '--redis-url', redis.url, ...args] });
  return { redis, t };
}

const unchecked = async (svc: TestService, reason: string): Promise<number | undefined> =>
  metric((await scrape(svc.service.httpPort)).series, 'tollgate_unchecked_total', { reason });

const RLS_PATH = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';

/** Whether the Redis store has a call out with no reply yet (its own bookkeeping: Redis's health follows it). */
const redisWaiting = (svc: TestService): boolean => (svc.service.stack.redis as unknown as { waitingSince?: number }).waitingSince !== undefined;

/** The late call's deadline (ms): its grpc-timeout. */
const DEADLINE_MS = 2000;

const codeOf = (p: Promise<unknown>): Promise<number | 'ok'> =>
  p.then(
    () => 'ok' as const,
    (err: { code: number }) => err.code,
  );

describe('tollgate_unchecked_total', () => {
  it('starts at 0 for every reason and counts each UNAVAILABLE answer of the allow policy', async () => {
    const s = await withRedis(['--redis-timeout-ms', '50', '--redis-failure', 'allow']);
    for (const reason of UNCHECKED_REASONS) expect(await unchecked(s.t, reason), reason).toBe(0);
    s.redis.signal('SIGKILL');
    await within(10_000, () => s.t.service.store.health().degraded, 'the store to be marked degraded');
    const codes = [];
    for (let i = 0; i < 5; i++) codes.push(await codeOf(s.t.rls.call(property('read', `Bearer down-${i}`))));
    expect(codes).toEqual(Array(5).fill(status.UNAVAILABLE));
    expect(await unchecked(s.t, 'store_unavailable')).toBe(5);
    expect(await unchecked(s.t, 'internal_error')).toBe(0);
  });

  it('counts an answer that came after the caller had given up as late, though it was counted in Redis', async () => {
    const s = await withRedis(['--redis-timeout-ms', '5000']);
    expect(await codeOf(s.t.rls.call(property('read', 'Bearer warm')))).toBe('ok');
    expect(await unchecked(s.t, 'late')).toBe(0); // read before the freeze: a scrape reads Redis's INFO too
    s.redis.signal('SIGSTOP');
    // Envoy's filter timeout, as the grpc-timeout of the call: the client gives up while Redis is frozen. 2 s,
    // so that even on a busy machine the call reaches the store before the client gives up (at 150 ms a busy
    // suite once saw it cancelled before it was read: never decided, so never late; at 600 ms, once in CI too).
    const slow = codeOf(s.t.rls.call(property('read', 'Bearer slow'), DEADLINE_MS));
    await within(DEADLINE_MS, () => redisWaiting(s.t), 'the call sent to the frozen Redis before its deadline');
    // The service's deadline runs from when it read the call, so it ends after the client's: Redis let go at the
    // client's DEADLINE_EXCEEDED could answer before that deadline and before the client's reset (sent after its
    // callback ran) is read, an answer in time to a caller still there (issue 59, on Node 24). Redis is let go
    // once the service's deadline has passed too: the call reached the store by `sentBy`, its grpc-timeout ≤ 2 s.
    const sentBy = Date.now();
    expect(await slow).toBe(status.DEADLINE_EXCEEDED);
    await within(DEADLINE_MS + 1000, () => Date.now() > sentBy + DEADLINE_MS, "the service's deadline for the call passed");
    s.redis.signal('SIGCONT');
    await within(10_000, async () => (await unchecked(s.t, 'late')) === 1, 'the late answer to be counted');
    expect(await unchecked(s.t, 'store_unavailable')).toBe(0);
  });

  it('counts an answer to a call its caller cancelled as late, though the call had no deadline of its own', async () => {
    const s = await withRedis(['--redis-timeout-ms', '5000']);
    expect(await codeOf(s.t.rls.call(property('read', 'Bearer warm')))).toBe('ok');
    s.redis.signal('SIGSTOP');
    // No grpc-timeout: the client's own deadline ran out (as Envoy's does, from before the call reached Tollgate)
    // and it reset the stream while Redis was frozen.
    const session = http2.connect(`http://127.0.0.1:${s.t.service.grpcPort}`);
    session.on('error', () => undefined);
    const req = session.request({ ':method': 'POST', ':path': RLS_PATH, 'content-type': 'application/grpc', te: 'trailers' });
    req.on('error', () => undefined);
    req.end(frame(Buffer.from(encodeRequest(property('read', 'Bearer cancelled')))));
    await within(5000, () => redisWaiting(s.t), 'the call sent to the frozen Redis');
    req.close(http2.constants.NGHTTP2_CANCEL);
    // A call answered at once after it on the same connection: the service read the reset before it (in order).
    const after = session.request({ ':method': 'POST', ':path': RLS_PATH, 'content-type': 'application/grpc', te: 'trailers' });
    after.on('data', () => undefined);
    after.end(frame(Buffer.from(encodeRequest({ domain: '', descriptors: [] }))));
    await new Promise((resolve) => after.on('close', resolve));
    s.redis.signal('SIGCONT');
    await within(10_000, async () => (await unchecked(s.t, 'late')) === 1, 'the answer nobody waits for counted late');
    session.close();
  });

  it('counts a refused request as invalid_request', async () => {
    const s = await withRedis([]);
    expect(await codeOf(s.t.rls.call({ domain: '', descriptors: [] }))).toBe(status.INVALID_ARGUMENT);
    expect(await unchecked(s.t, 'invalid_request')).toBe(1);
  });
});

describe('READY_REQUIRES_STORE', () => {
  const readyz = async (svc: TestService): Promise<{ status: number; reason?: string }> => {
    const r = await fetch(`http://127.0.0.1:${svc.service.httpPort}/readyz`);
    return { status: r.status, reason: ((await r.json()) as { reason?: string }).reason };
  };

  it.each([
    ['false', 200, /policy allow/],
    ['true', 503, /READY_REQUIRES_STORE/],
  ])('=%s: a lost store leaves the replica ready %s', async (value, expected, reason) => {
    const s = await withRedis(['--redis-timeout-ms', '50', '--ready-requires-store', value]);
    expect((await readyz(s.t)).status).toBe(200);
    s.redis.signal('SIGKILL');
    await within(10_000, () => s.t.service.store.health().degraded, 'the store to be marked degraded');
    const r = await readyz(s.t);
    expect(r.status).toBe(expected);
    expect(r.reason).toMatch(reason);
    await s.redis.restart();
    await within(10_000, async () => (await readyz(s.t)).status === 200, 'ready again once Redis is back');
  });
});

describe('Redis memory as Tollgate sees it', () => {
  it('reports used memory, maxmemory and evictions read from Redis, and leaves them out while Redis is frozen', async () => {
    const s = await withRedis(['--redis-timeout-ms', '50'], ['--maxmemory', '4mb', '--maxmemory-policy', 'allkeys-lru']);
    const first = (await scrape(s.t.service.httpPort)).series;
    expect(metric(first, 'tollgate_redis_maxmemory_bytes')).toBe(4 * 1024 * 1024);
    expect(metric(first, 'tollgate_redis_used_memory_bytes')).toBeGreaterThan(0);
    expect(metric(first, 'tollgate_redis_evicted_keys_total')).toBe(0);
    // Fill Redis past maxmemory from a second client: the LRU policy evicts.
    const filler = new Redis(s.redis.port, '127.0.0.1');
    const pipe = filler.pipeline();
    for (let i = 0; i < 6000; i++) pipe.set(`filler:${i}`, 'x'.repeat(1024));
    await pipe.exec();
    filler.disconnect();
    await within(5000, async () => (metric((await scrape(s.t.service.httpPort)).series, 'tollgate_redis_evicted_keys_total') ?? 0) > 0, 'evictions');

    s.redis.signal('SIGSTOP');
    const frozen = await scrape(s.t.service.httpPort);
    expect(metric(frozen.series, 'tollgate_redis_used_memory_bytes')).toBeUndefined();
    expect(metric(frozen.series, 'tollgate_build_info')).toBe(1);
  });
});
