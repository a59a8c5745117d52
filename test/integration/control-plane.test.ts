import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fingerprint } from '../../src/fingerprint.js';
import { SERVE_OPTIONS } from '../../src/settings/settings.js';
import { jsonOf } from '../helpers/json.js';
import { runCli } from '../helpers/process.js';
import { type RedisServer, startRedis } from '../helpers/redis.js';
import { capturingLogger, property, type RlsRequest, startTestService, type TestService } from '../helpers/service.js';
import { inOneSecond, within } from '../helpers/time.js';

const ADMIN = 'admin-credential-for-tests';
const TIER = 'multi-property-group';

/** A client of each test's own: no test depends on what another assigned, counted or reset, so they pass in
 * any order. Every token holds "big-customer", which the last test looks for in Redis and in the logs. */
function newClient(): { token: string; fp: string } {
  const token = `Bearer big-customer-${Math.random().toString(36).slice(2)}`;
  return { token, fp: fingerprint(token) };
}

/** The per-second limit an instance applies to a token now, read with a check-only request. */
async function perSecond(t: TestService, category: string, token: string): Promise<number | undefined> {
  const req: RlsRequest = { domain: 'property-api', descriptors: [{ entries: property(category, token).descriptors[0]!.entries, hits_addend: { value: 0 } }] };
  const r = await t.rls.call(req);
  return r.statuses[0]!.current_limit?.unit === 'SECOND' ? r.statuses[0]!.current_limit.requests_per_unit : undefined;
}

/** How many of `n` concurrent calls one second admits. Waiting for the second to start is the subject here:
 * the burst must fall in one window. */
async function admitted(t: TestService, category: string, token: string, n: number): Promise<number> {
  // Spilled into the next second, the burst is sent again there: a new per-second window for the same token.
  const rs = await inOneSecond(() => Promise.all(Array.from({ length: n }, () => t.rls.call(property(category, token)))));
  return rs.filter((r) => r.overall_code === 'OK').length;
}

describe('tiers at run time, shared by replicas through Redis', () => {
  let redis: RedisServer;
  let a: TestService;
  let b: TestService;
  const logs = [capturingLogger('debug'), capturingLogger('debug')];
  const admin = (t: TestService, path: string, init: RequestInit = {}, credential = ADMIN): Promise<Response> =>
    fetch(`http://127.0.0.1:${t.service.adminPort}${path}`, {
      ...init,
      headers: { ...(credential ? { authorization: `Bearer ${credential}` } : {}), 'content-type': 'application/json' },
    });

  /** Puts the client in the tier through a, and waits until b applies it. */
  async function assignedEverywhere(c: { token: string; fp: string }): Promise<void> {
    const put = await admin(a, `/admin/tiers/${c.fp}`, { method: 'PUT', body: JSON.stringify({ tier: TIER }) });
    expect(put.status).toBe(200);
    await within(5000, async () => (await perSecond(b, 'read', c.token)) === 30);
  }

  beforeAll(async () => {
    redis = await startRedis();
    const args = ['--store', 'redis', '--redis-url', redis.url, '--redis-timeout-ms', '200', '--redis-failure', 'local'];
    const started = await Promise.all(logs.map((log) => startTestService({ realClock: true, args, env: { TOLLGATE_ADMIN_TOKEN: ADMIN }, logger: log.logger })));
    a = started[0]!;
    b = started[1]!;
  });
  afterAll(async () => {
    await a?.close();
    await b?.close();
    redis.signal('SIGCONT');
    await redis?.stop();
  });

  it('refuses missing or wrong credentials, unknown tiers and malformed fingerprints', async () => {
    const c = newClient();
    // Not on the HTTP port, which Prometheus may reach: on its own port, bound to loopback by default.
    expect((await fetch(`http://127.0.0.1:${a.service.httpPort}/admin/tiers`, { headers: { authorization: `Bearer ${ADMIN}` } })).status).toBe(404);
    expect(a.service.adminPort).not.toBe(a.service.httpPort);
    expect(SERVE_OPTIONS['admin-host'].default).toBe('127.0.0.1');
    expect((await admin(a, '/admin/tiers', {}, '')).status).toBe(401);
    expect((await admin(a, '/admin/tiers', {}, 'wrong')).status).toBe(401);
    const unknown = await admin(a, `/admin/tiers/${c.fp}`, { method: 'PUT', body: JSON.stringify({ tier: 'platinum' }) });
    expect(unknown.status).toBe(400);
    expect((await jsonOf(unknown)).error).toBe(`unknown tier (8 characters): known tiers are ${TIER}`);
    const raw = await admin(a, `/admin/tiers/${encodeURIComponent(c.token)}`, { method: 'PUT', body: JSON.stringify({ tier: TIER }) });
    expect(raw.status).toBe(400);
    expect(await raw.text()).not.toContain('big-customer');
  });

  it('an assignment made through one replica is enforced by the other within 5 s: read 30/s, write 15/s', async () => {
    const c = newClient();
    expect(await perSecond(b, 'read', c.token)).toBe(10);
    const put = await admin(a, `/admin/tiers/${c.fp}`, { method: 'PUT', body: JSON.stringify({ tier: TIER }) });
    expect(put.status).toBe(200);
    expect(await jsonOf(put)).toMatchObject({ fingerprint: c.fp, tier: TIER, by: fingerprint(ADMIN) });
    const took = await within(5000, async () => (await perSecond(b, 'read', c.token)) === 30);
    expect(took).toBeLessThan(5000);
    expect(await admitted(b, 'read', c.token, 40)).toBe(30);
    expect(await admitted(b, 'write', c.token, 20)).toBe(15);
    expect(await perSecond(b, 'reports', c.token)).toBe(2);
    const list = await jsonOf(await admin(b, '/admin/tiers'));
    expect(list.assignments).toContainEqual(expect.objectContaining({ fingerprint: c.fp, tier: TIER }));
  });

  it('inspect shows the tier and the counters per category and window; reset zeroes them everywhere', async () => {
    const c = newClient();
    await assignedEverywhere(c);
    await admitted(a, 'reports', c.token, 3); // 2 admitted, then over
    const cache = b.service.stack.cache!;
    const known = cache.size;
    await b.rls.call(property('reports', c.token));
    expect(cache.size).toBe(known + 1); // b learned that the client's reports second is full
    const view = await jsonOf(await admin(b, `/admin/tokens/${c.fp}`));
    expect(view.tier).toBe(TIER);
    const reportsHour = view.counters.find((x: { rule: string; window: string }) => x.rule === 'category_reports.token' && x.window === 'hour');
    expect(reportsHour).toMatchObject({ domain: 'property-api', category: 'reports', limit: 200, used: 2, remaining: 198 });
    const readSecondLimit = view.counters.find((x: { rule: string; window: string }) => x.rule === 'category_read.token' && x.window === 'second').limit;
    expect(readSecondLimit).toBe(30);
    expect(view.counters).toHaveLength(6);

    const reset = await admin(a, `/admin/tokens/${c.fp}/counters`, { method: 'DELETE' });
    expect(reset.status).toBe(200);
    const after = await jsonOf(await admin(b, `/admin/tokens/${c.fp}`));
    expect(after.counters.every((x: { used: number }) => x.used === 0)).toBe(true);
    // b learns of the reset through pub/sub and drops its cached "full until" time (entries never expire by
    // themselves, and nothing else ran on b meanwhile: the entry gone proves the message arrived).
    await within(2000, async () => cache.size === known);
    expect((await b.rls.call(property('reports', c.token))).overall_code).toBe('OK');
  });

  it('a frozen Redis does not delay decisions: the last known assignment still applies', async () => {
    const c = newClient();
    await assignedEverywhere(c);
    redis.signal('SIGSTOP');
    try {
      await within(3000, async () => {
        await b.rls.call(property('write', 'Bearer probe'));
        return b.service.store.health().degraded;
      });
      expect(await admitted(b, 'read', c.token, 35)).toBe(30);
    } finally {
      redis.signal('SIGCONT');
    }
    await within(5000, async () => !b.service.store.health().degraded && !a.service.store.health().degraded);
  });

  it('removal through one replica restores 10/s on the other', async () => {
    const c = newClient();
    await assignedEverywhere(c);
    const del = await admin(a, `/admin/tiers/${c.fp}`, { method: 'DELETE' });
    expect(del.status).toBe(200);
    await within(5000, async () => (await perSecond(b, 'read', c.token)) === 10);
    expect(await admitted(b, 'read', c.token, 15)).toBe(10);
    expect((await admin(a, `/admin/tiers/${c.fp}`, { method: 'DELETE' })).status).toBe(404);
  });

  it('the CLI drives the same API', async () => {
    const c = newClient();
    const env = { TOLLGATE_ADMIN_TOKEN: ADMIN, TOLLGATE_URL: `http://127.0.0.1:${a.service.adminPort}` };
    const assign = await runCli(['tiers', 'assign', c.token, TIER], env);
    // The rules whose limits the tier changes, as the bundled config has them.
    expect(assign.stdout.trim()).toBe(`${c.fp} → ${TIER} (property-api/category_read.token, property-api/category_write.token)`);
    const list = await runCli(['tiers', 'list', '--json'], env);
    expect(JSON.parse(list.stdout).assignments).toContainEqual(expect.objectContaining({ fingerprint: c.fp, tier: TIER }));
    const inspect = await runCli(['inspect', '--fingerprint', c.fp], env);
    expect(inspect.code).toBe(0);
    expect(inspect.stdout).toContain(`${c.fp}  tier: ${TIER}`);
    expect(inspect.stdout).toMatch(/property-api\/category_read\.token {2}per second: \d+\/30 used/);
    const remove = await runCli(['tiers', 'remove', '--fingerprint', c.fp], env);
    expect(remove.stdout.trim()).toBe(`${c.fp} → no tier`);
    const wrong = await runCli(['tiers', 'list'], { ...env, TOLLGATE_ADMIN_TOKEN: 'nope' });
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toContain('401');
    const bad = await runCli(['tiers', 'assign', '--fingerprint', c.fp, 'platinum'], env);
    expect(bad.stderr).toContain('unknown tier (8 characters)');
    expect(bad.stderr).not.toContain('platinum');
    // A tenant id of 32 hex characters is not taken for a fingerprint: refused unasked, a token with --token.
    const tenant = '0123456789abcdef0123456789abcdef';
    const unasked = await runCli(['tiers', 'assign', tenant, TIER], env);
    expect([unasked.code, unasked.stderr]).toEqual([2, expect.stringMatching(/may be a token or a fingerprint: pass --token/)]);
    const told = await runCli(['tiers', 'assign', '--token', tenant, TIER], env);
    expect(told.stdout.trim()).toMatch(new RegExp(`^${fingerprint(tenant)} → ${TIER} \\(`));
  });

  it('no raw token in Redis or in the logs; every admin change is logged with who made it', async () => {
    const c = newClient();
    expect((await admin(a, `/admin/tiers/${c.fp}`, { method: 'PUT', body: JSON.stringify({ tier: TIER }) })).status).toBe(200);
    expect((await admin(a, `/admin/tokens/${c.fp}/counters`, { method: 'DELETE' })).status).toBe(200);
    expect((await admin(a, `/admin/tiers/${c.fp}`, { method: 'DELETE' })).status).toBe(200);
    await a.rls.call(property('read', c.token)); // counters in Redis
    const keys = await redis.cli('--scan', '--pattern', '*');
    expect(keys).toContain(c.fp.slice(0, 16)); // the client's counters are there, by fingerprint
    expect(keys).not.toContain('big-customer');
    expect(await redis.cli('HGETALL', 'tollgate:tiers')).not.toContain('big-customer');
    const all = logs.flatMap((l) => l.lines());
    expect(JSON.stringify(all)).not.toContain('big-customer');
    expect(JSON.stringify(all)).not.toContain(ADMIN);
    const changes = all.filter((l) => l.msg === 'admin change' && l.fingerprint === c.fp);
    expect(changes.map((x) => x.action)).toEqual(['tier.assign', 'counters.reset', 'tier.remove']);
    expect(changes.every((x) => x.admin === fingerprint(ADMIN) && typeof x.time === 'number')).toBe(true);
  });
});

describe('admin API switched off', () => {
  it('answers 404 and says how to enable it', async () => {
    const t = await startTestService();
    try {
      const r = await fetch(`http://127.0.0.1:${t.service.httpPort}/admin/tiers`);
      expect(r.status).toBe(404);
      expect((await jsonOf(r)).error).toMatch(/TOLLGATE_ADMIN_TOKEN/);
    } finally {
      await t.close();
    }
  });
});
