import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compileSources } from '../../src/config/load.js';
import { MemoryTierStore } from '../../src/control/tier-store.js';
import { ManualClock } from '../../src/counters/clock.js';
import { fingerprint } from '../../src/fingerprint.js';
import { Limiter } from '../../src/limiter/limiter.js';
import type { DecisionInput } from '../../src/limiter/plan.js';
import { MAX_SPEND_LISTED, spendWindowOf } from '../../src/store/spend-top.js';
import { runCli } from '../helpers/process.js';
import { randomFrom } from '../helpers/random.js';
import { configDir, type RlsRequest, startTestService, type TestService } from '../helpers/service.js';
import { everyStore } from '../helpers/stores.js';

// Who is nearest their budget (issue 62, item 1): each window of a charge_mode rule lists its counters by the
// share of their own limit they used (a tier's for a tenant in one), written by the store in the step that
// charges. 1,000 tenants charged at random on memory, one Redis and a 3-master Cluster: the fullest equal the
// test's own ledger, tiers included; a bucket's list orders by its debt; 100,000 tenants leave each list at its
// bound. Then the admin API and the CLI, which maps fingerprints to the operator's own ids on its machine.

const CONFIG = `domain: llm
token_key: tenant
tiers:
  enterprise: {}
descriptors:
  - key: tenant
    charge_mode: true
    rate_limits:
      - {unit: hour, requests_per_unit: 1000, name: tokens-per-hour}
    tier_limits:
      enterprise:
        - {unit: hour, requests_per_unit: 4000, name: enterprise-tokens-per-hour}
  - key: bucket
    charge_mode: true
    rate_limit: {unit: hour, requests_per_unit: 3600, algorithm: token_bucket, burst: 100}
`;
const T0 = 1_800_000_000_000; // a whole hour: every charge falls in one window
const charge = (key: string, tenant: string, hits: number): DecisionInput => ({
  domain: 'llm',
  hits,
  descriptors: [{ entries: [{ key, value: tenant }], hits }],
});

/** The ledger's fullest first, as a list orders them: by share, ties by the greater fingerprint. */
function fullest(spent: Map<string, number>, limitOf: (tenant: string) => number, n: number): { counter: string; share: number }[] {
  return [...spent]
    .map(([t, s]) => ({ counter: fingerprint(t), share: s / limitOf(t) }))
    .sort((a, b) => b.share - a.share || (a.counter < b.counter ? 1 : -1))
    .slice(0, n);
}

const near = (got: { counter: string; share: number }[]) => got.map((c) => ({ counter: c.counter, share: Math.round(c.share * 1e9) / 1e9 }));

describe('spend lists, kept with the charge, on every store', () => {
  const { stores } = everyStore({ cluster: true });
  const config = compileSources([{ file: 'llm.yaml', text: CONFIG }]);
  const [tenantRule, bucketRule] = config.domains.get('llm')!.rules;
  const HOUR = spendWindowOf(tenantRule!.counterId, tenantRule!.limits[0]!);
  const BUCKET = spendWindowOf(bucketRule!.counterId, bucketRule!.limits[0]!);
  const big = new Set(Array.from({ length: 10 }, (_, i) => fingerprint(`t${i * 97}`)));
  const tiers = { tierOf: (fp: string) => (big.has(fp) ? 'enterprise' : undefined) };

  it.each(stores)('%s: the 10 fullest by own limit equal a ledger of 1,000 tenants charged at random', async (_name, make) => {
    const clock = new ManualClock(T0);
    const store = await make(clock);
    const limiter = new Limiter({ config: () => config, store, clock, tiers });
    const random = randomFrom(11);
    const spent = new Map<string, number>();
    for (let round = 0; round < 6; round++) {
      // A burst of 500 at once: batched as Envoy's calls would be.
      const calls = Array.from({ length: 500 }, () => {
        // One charge in ten is a tier's tenant's: they spend four times more, by a limit four times larger.
        const tenant = random() < 0.1 ? `t${Math.floor(random() * 10) * 97}` : `t${Math.floor(random() * 1000)}`;
        const hits = 1 + Math.floor(random() * 300);
        spent.set(tenant, (spent.get(tenant) ?? 0) + hits);
        return limiter.decide(charge('tenant', tenant, hits));
      });
      await Promise.all(calls);
    }
    const limitOf = (t: string) => (big.has(fingerprint(t)) ? 4000 : 1000);
    const page = await store.spendTop!.read(HOUR, 0, 10);
    expect(near(page.counters)).toEqual(near(fullest(spent, limitOf, 10)));
    // Tier tenants are among them by their own limit, and not all of them (by the rule's, they would be).
    expect(page.counters.filter((c) => big.has(c.counter)).length).toBeGreaterThan(0);
    expect(page.counters.filter((c) => big.has(c.counter)).length).toBeLessThan(10);
    expect(page.listed).toBe(spent.size);
    // A page further on is the ledger's further on.
    expect(near((await store.spendTop!.read(HOUR, 10, 5)).counters)).toEqual(near(fullest(spent, limitOf, 15).slice(10)));
    // A bucket's list orders by its debt: charged 60, 90 and 30 of a burst of 100, then an hour's refill in part.
    for (const [t, n] of [
      ['a', 60],
      ['b', 90],
      ['c', 30],
    ] as const)
      await limiter.decide(charge('bucket', t, n));
    clock.advance(20_000); // 20 tokens back
    await limiter.decide(charge('bucket', 'c', 1));
    const bucket = (await store.spendTop!.read(BUCKET, 0, 5)).counters;
    expect(near(bucket)).toEqual(near([fingerprint('b'), fingerprint('a'), fingerprint('c')].map((counter, i) => ({ counter, share: [0.9, 0.6, 0.11][i]! }))));
    // A refund, and Envoy's own limit on the rule (a limit the request sets), never write the rule's list.
    const before = await store.spendTop!.read(HOUR, 0, MAX_SPEND_LISTED);
    await limiter.decide({ domain: 'llm', hits: 1, descriptors: [{ entries: [{ key: 'tenant', value: 'evil' }], hits: 1, refund: true }] });
    const override = { requestsPerUnit: 1, unit: 'hour' as const };
    await limiter.decide({ domain: 'llm', hits: 500, descriptors: [{ entries: [{ key: 'tenant', value: 'evil' }], hits: 500, override }] });
    expect(await store.spendTop!.read(HOUR, 0, MAX_SPEND_LISTED)).toEqual(before);
    // A new hour starts a new list.
    clock.advance(3_600_000);
    expect((await store.spendTop!.read(HOUR, 0, 10)).listed).toBe(0);
  });

  it.each(stores)(
    `%s: 100,000 tenants leave each list at ${MAX_SPEND_LISTED}, the fullest kept`,
    async (_name, make) => {
      const clock = new ManualClock(T0);
      const store = await make(clock);
      const limiter = new Limiter({ config: () => config, store, clock, tiers: { tierOf: () => undefined } });
      for (let i = 0; i < 100_000; i += 2000) {
        await Promise.all(Array.from({ length: 2000 }, (_, j) => limiter.decide(charge('tenant', `f${i + j}`, 1 + ((i + j) % 997)))));
      }
      const page = await store.spendTop!.read(HOUR, 0, MAX_SPEND_LISTED);
      // One list per master: at most the bound on each (3 masters on the Cluster), the fullest kept over all.
      expect(page.listed).toBeLessThanOrEqual(MAX_SPEND_LISTED * (_name === 'redis cluster' ? 3 : 1));
      expect(page.listed).toBeGreaterThanOrEqual(MAX_SPEND_LISTED);
      const shares = Array.from({ length: 100_000 }, (_, i) => (1 + (i % 997)) / 1000).sort((a, b) => b - a);
      expect(page.counters.map((c) => c.share)).toEqual(shares.slice(0, MAX_SPEND_LISTED));
    },
    120_000,
  );
});

describe('spend through the admin API and the CLI', () => {
  const ADMIN = 'admin-credential-for-spend';
  let s: TestService;
  const tiers = new MemoryTierStore();
  const dir = configDir({ 'llm.yaml': CONFIG });
  beforeAll(async () => {
    await tiers.assign({ fingerprint: fingerprint('acme-corp'), tier: 'enterprise', assignedAt: new Date().toISOString(), by: 'test' });
    s = await startTestService({ configDir: dir, env: { TOLLGATE_ADMIN_TOKEN: ADMIN }, tiers });
  });
  afterAll(() => s?.close());
  const rls = (tenant: string, hits: number): RlsRequest => ({
    domain: 'llm',
    descriptors: [{ entries: [{ key: 'tenant', value: tenant }], hits_addend: { value: hits } }],
  });
  const spend = async (query: string) => {
    const r = await fetch(`http://127.0.0.1:${s.service.adminPort}/v1/spend${query}`, { headers: { authorization: `Bearer ${ADMIN}` } });
    return {
      status: r.status,
      body: (await r.json()) as { error?: string; windows: { counters: { counter: string; share: number }[]; next: number | null }[] },
    };
  };

  it('lists the fullest by fingerprint, pages, and refuses what it cannot answer without echoing it', async () => {
    for (const [t, n] of [
      ['acme-corp', 3000],
      ['beta', 500],
      ['gamma', 900],
      ['delta', 100],
    ] as const)
      await s.rls.call(rls(t, n));
    const { status, body } = await spend('?rule=tokens-per-hour&top=2');
    expect(status).toBe(200);
    expect(body.windows[0]!.counters).toEqual([
      { counter: fingerprint('gamma'), share: 0.9 },
      { counter: fingerprint('acme-corp'), share: 0.75 },
    ]);
    expect(body.windows[0]!.next).toBe(2);
    expect((await spend('?rule=tenant&top=2&offset=2')).body.windows[0]!.counters.map((c) => c.share)).toEqual([0.5, 0.1]);
    expect(JSON.stringify(body)).not.toContain('gamma');
    const unknown = await spend('?rule=secret-tenant-text');
    expect([unknown.status, unknown.body.error?.includes('secret')]).toEqual([404, false]);
    expect((await spend('?rule=tenant&top=0')).status).toBe(400);
    expect((await spend('?rule=tenant&top=1001')).status).toBe(400);
    expect((await spend('')).status).toBe(400);
    expect((await spend(`?rule=${'x'.repeat(300)}`)).status).toBe(400);
    const anonymous = await fetch(`http://127.0.0.1:${s.service.adminPort}/v1/spend?rule=tenant`);
    expect(anonymous.status).toBe(401);
  });

  it('tollgate spend top maps fingerprints to the operator’s ids locally', async () => {
    const names = join(dir, 'tenants.txt');
    writeFileSync(names, 'gamma\nacme-corp\nnot-a-customer\n');
    const env = { TOLLGATE_ADMIN_TOKEN: ADMIN, TOLLGATE_URL: `http://127.0.0.1:${s.service.adminPort}` };
    const run = await runCli(['spend', 'top', '--rule', 'tenant', '--top', '3', '--names', names], env);
    expect(run.code).toBe(0);
    expect(run.stdout).toContain('gamma  90.0%');
    expect(run.stdout).toContain('acme-corp  75.0%');
    expect(run.stdout).toContain(`${fingerprint('beta')}  50.0%`); // not in the file: its fingerprint
    const json = await runCli(['spend', 'top', '--rule', 'tenant', '--json'], env);
    expect(JSON.parse(json.stdout).windows[0].counters[0]).toEqual({ counter: fingerprint('gamma'), share: 0.9 });
    expect((await runCli(['spend', 'top'], env)).code).toBe(2);
    expect((await runCli(['spend', 'top', '--rule', 'tenant', '--names', join(dir, 'missing.txt')], env)).code).toBe(2);
  });
});
