import type { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { RedisTierStore } from '../../src/control/redis-tier-store.js';
import { MemoryTierStore, type TierAssignment } from '../../src/control/tier-store.js';
import { StoreConnectionError, StoreUnavailableError } from '../../src/errors.js';
import { fingerprint } from '../../src/fingerprint.js';
import { createClient, parseRedisUrl } from '../../src/store/redis-connection.js';
import { jsonOf } from '../helpers/json.js';
import { metric, scrape } from '../helpers/metrics.js';
import { type RedisServer, startRedis } from '../helpers/redis.js';
import { capturingLogger, silentLogger, startTestService, type TestService } from '../helpers/service.js';
import { within } from '../helpers/time.js';

// Errors are told apart by their class, the same way for gRPC, HTTP and the admin API: a client's mistake is
// 400, a store that fails or does not answer 503, anything else 500 with a generic message.

const ADMIN = 'admin-credential-for-error-tests';
const FP = fingerprint('Bearer error-mapping-client');
const assignment = (tier = 'multi-property-group'): TierAssignment => ({ fingerprint: FP, tier, assignedAt: new Date().toISOString(), by: 'test' });

describe("the Redis tier store fails with the counter store's StoreUnavailableError", () => {
  let redis: RedisServer;
  let client: Redis;
  let store: RedisTierStore;
  beforeAll(async () => {
    redis = await startRedis();
    client = createClient(parseRedisUrl(redis.url, 'single'), { commandTimeoutMs: 100, sentinelPassword: undefined }) as Redis;
    client.on('error', () => undefined); // the kill below is the point; ioredis would print it otherwise
    store = new RedisTierStore({ client, keyPrefix: 'tollgate:', logger: silentLogger, refreshMs: 60_000, timeoutMs: 100 });
    await within(5000, () => client.status === 'ready');
    await store.start();
  });
  afterAll(async () => {
    await store.close();
    client.disconnect();
    await redis.stop();
  });

  it('when Redis does not answer in time', async () => {
    redis.signal('SIGSTOP');
    try {
      for (const call of [() => store.assign(assignment()), () => store.remove(FP), () => store.list()]) {
        const err = await call().then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(err).toBeInstanceOf(StoreUnavailableError);
        expect(err).not.toBeInstanceOf(StoreConnectionError); // the connection is there: Redis is silent
        expect((err as Error).message).toBe('redis: Command timed out after 100 ms');
      }
    } finally {
      redis.signal('SIGCONT');
    }
    await within(
      5000,
      async () =>
        await store.assign(assignment()).then(
          () => true,
          () => false,
        ),
    );
    expect(store.tierOf(FP)).toBe('multi-property-group');
  });

  it('when Redis is gone', async () => {
    redis.signal('SIGKILL');
    await within(5000, () => client.status !== 'ready');
    const err = await store.assign(assignment()).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(StoreConnectionError); // a StoreUnavailableError, of the kind the metrics call connection
    expect(err).toBeInstanceOf(StoreUnavailableError);
    expect((err as Error).message).toMatch(/^redis: /);
  });
});

describe('the admin API maps errors through the one mapping', () => {
  let redis: RedisServer;
  let t: TestService | undefined;
  beforeAll(async () => {
    redis = await startRedis();
  });
  afterEach(async () => {
    redis.signal('SIGCONT');
    await t?.close();
    t = undefined;
  });
  afterAll(async () => redis.stop());

  const admin = (path: string, init: RequestInit = {}): Promise<Response> =>
    fetch(`http://127.0.0.1:${t!.service.adminPort}${path}`, { ...init, headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' } });

  it("Redis frozen: 503 with the store's own words, for tiers and for counters alike; logged without the path", async () => {
    const log = capturingLogger();
    const args = ['--store', 'redis', '--redis-url', redis.url, '--redis-timeout-ms', '200', '--redis-failure', 'allow'];
    t = await startTestService({ realClock: true, args, env: { TOLLGATE_ADMIN_TOKEN: ADMIN }, logger: log.logger });
    redis.signal('SIGSTOP');
    const put = await admin(`/admin/tiers/${FP}`, { method: 'PUT', body: JSON.stringify({ tier: 'multi-property-group' }) });
    expect(put.status).toBe(503);
    expect((await jsonOf(put)).error).toMatch(/^redis: Command timed out after \d+ ms$/);
    const inspect = await admin(`/admin/tokens/${FP}`);
    expect(inspect.status).toBe(503);
    expect((await jsonOf(inspect)).error).toMatch(/^redis/);
    const lines = log.lines().filter((l) => l.msg === 'admin request failed: store unavailable');
    expect(lines.map((l) => l.method)).toEqual(['PUT', 'GET']);
    expect(JSON.stringify(lines)).not.toContain(FP);
  });

  it('an unexpected error: 500 with a generic message, its text logged, never sent back', async () => {
    const MARK = 'Bearer leaked-into-an-error-7c1d';
    // A real tier store with one planted fault: nothing in the service throws a plain Error on purpose.
    class FaultyTierStore extends MemoryTierStore {
      override list(): Promise<TierAssignment[]> {
        return Promise.reject(new Error(`store unavailable: ${MARK}`));
      }
    }
    const log = capturingLogger();
    t = await startTestService({ tiers: new FaultyTierStore(), env: { TOLLGATE_ADMIN_TOKEN: ADMIN }, logger: log.logger });
    const res = await admin('/admin/tiers');
    expect(res.status).toBe(500);
    expect(await res.text()).toBe('{"error":"internal error"}');
    const line = log.lines().find((l) => l.msg === 'unexpected error while answering an admin request');
    expect(line).toMatchObject({ method: 'GET', err: { message: `store unavailable: ${MARK}` } });
  });

  it("a client's mistake: 400 naming it", async () => {
    t = await startTestService({ env: { TOLLGATE_ADMIN_TOKEN: ADMIN } });
    const res = await admin('/admin/tiers/not-hex', { method: 'PUT', body: '{}' });
    expect(res.status).toBe(400);
    expect((await jsonOf(res)).error).toMatch(/^not a fingerprint/);
  });

  it('a counter reset that cannot be announced to the other replicas still answers 200, saying so', async () => {
    class SilentTierStore extends MemoryTierStore {
      override announceReset(): Promise<void> {
        return Promise.reject(new Error('redis: Connection is closed.'));
      }
    }
    t = await startTestService({ tiers: new SilentTierStore(), env: { TOLLGATE_ADMIN_TOKEN: ADMIN } });
    const res = await admin(`/admin/tokens/${FP}/counters`, { method: 'DELETE' });
    expect(res.status).toBe(200);
    expect(await jsonOf(res)).toMatchObject({ fingerprint: FP, announced: false });
  });

  it('admin error answers are counted under endpoint /admin, never under the path sent', async () => {
    t = await startTestService({ env: { TOLLGATE_ADMIN_TOKEN: ADMIN } });
    await admin('/admin/tiers/not-hex', { method: 'PUT', body: '{}' });
    await fetch(`http://127.0.0.1:${t.service.adminPort}/admin/tiers`); // no credential
    await admin('/s3cr3t-path');
    const { text, series } = await scrape(t.service.httpPort);
    expect(metric(series, 'tollgate_http_errors_total', { endpoint: '/admin', code: '400' })).toBe(1);
    expect(metric(series, 'tollgate_http_errors_total', { endpoint: '/admin', code: '401' })).toBe(1);
    expect(metric(series, 'tollgate_http_errors_total', { endpoint: '/admin', code: '404' })).toBe(1);
    expect(text).not.toContain('s3cr3t');
  });
});

describe('HTTP /json and /explain failures are counted apart from gRPC errors', () => {
  let t: TestService | undefined;
  afterEach(async () => {
    await t?.close();
    t = undefined;
  });

  const post = (path: string, body: string, type = 'application/json'): Promise<Response> =>
    fetch(`http://127.0.0.1:${t!.service.httpPort}${path}`, { method: 'POST', headers: { 'content-type': type }, body });
  const counts = async (): Promise<Map<string, number>> => (await scrape(t!.service.httpPort)).series;

  it('bad input: tollgate_http_errors_total by endpoint and status; tollgate_grpc_errors_total unmoved', async () => {
    t = await startTestService();
    const empty = JSON.stringify({ domain: 'property-api', descriptors: [] });
    expect((await post('/json', empty)).status).toBe(400);
    expect((await post('/json', empty)).status).toBe(400);
    expect((await post('/explain', empty)).status).toBe(400);
    expect((await post('/explain', '{}', 'text/plain')).status).toBe(415);
    expect((await fetch(`http://127.0.0.1:${t.service.httpPort}/explain`)).status).toBe(405);
    const series = await counts();
    expect(metric(series, 'tollgate_http_errors_total', { endpoint: '/json', code: '400' })).toBe(2);
    expect(metric(series, 'tollgate_http_errors_total', { endpoint: '/explain', code: '400' })).toBe(1);
    expect(metric(series, 'tollgate_http_errors_total', { endpoint: '/explain', code: '415' })).toBe(1);
    expect(metric(series, 'tollgate_http_errors_total', { endpoint: '/explain', code: '405' })).toBe(1);
    expect(metric(series, 'tollgate_grpc_errors_total', { code: 'INVALID_ARGUMENT' })).toBeUndefined();

    // And a gRPC call's failure still counts there, not here.
    await t.rls.call({ domain: '', descriptors: [] }).catch(() => undefined);
    const after = await counts();
    expect(metric(after, 'tollgate_grpc_errors_total', { code: 'INVALID_ARGUMENT' })).toBe(1);
    expect(metric(after, 'tollgate_http_errors_total', { endpoint: '/json', code: '400' })).toBe(2);
  });

  it('a store failure on /json: 503, counted under /json', async () => {
    const redis = await startRedis();
    try {
      const args = ['--store', 'redis', '--redis-url', redis.url, '--redis-timeout-ms', '100', '--redis-failure', 'allow'];
      t = await startTestService({ realClock: true, args });
      redis.signal('SIGSTOP');
      const body = JSON.stringify({ domain: 'property-api', descriptors: [{ entries: [{ key: 'category', value: 'read' }] }] });
      const res = await post('/json', body);
      expect(res.status).toBe(503);
      expect((await jsonOf(res)).error).toMatch(/^redis/);
      const series = await counts();
      expect(metric(series, 'tollgate_http_errors_total', { endpoint: '/json', code: '503' })).toBe(1);
      expect(metric(series, 'tollgate_grpc_errors_total', { code: 'UNAVAILABLE' })).toBeUndefined();
    } finally {
      redis.signal('SIGCONT');
      await t?.close();
      t = undefined;
      await redis.stop();
    }
  });
});
