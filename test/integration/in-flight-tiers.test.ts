import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compileSources } from '../../src/config/load.js';
import { ManualClock } from '../../src/counters/clock.js';
import { fingerprint } from '../../src/fingerprint.js';
import { Limiter } from '../../src/limiter/limiter.js';
import { takeOf } from '../helpers/checks.js';
import { runCli } from '../helpers/process.js';
import { configDir, type RlsRequest, startTestService, type TestService } from '../helpers/service.js';
import { everyStore } from '../helpers/stores.js';

// Tiers for in-flight limits (issue 61, item 3): an in_flight rule's tier_limits give a client in a tier its
// own number of slots, a run-time assignment moves a tenant to it, and `tiers assign` says when no rule uses
// the tier instead of exiting 0.

const CONFIG = `domain: k
token_key: tenant
tiers:
  enterprise: {}
  gold: {}
descriptors:
  - key: tenant
    in_flight: {limit: 2, lease: 1h, request_key: request_id}
    tier_limits:
      enterprise: {limit: 4}
`;
const T0 = 1_800_000_000_000;
const take = takeOf('k');

describe('an in_flight rule with tier_limits, on every store', () => {
  const { stores } = everyStore({ cluster: true });
  const config = compileSources([{ file: 'k.yaml', text: CONFIG }]);
  const big = fingerprint('big');

  it.each(stores)('%s: a tenant in the tier holds its own number of slots; the rest the rule limit', async (_name, make) => {
    const clock = new ManualClock(T0);
    const tiers = { tierOf: (fp: string) => (fp === big ? 'enterprise' : undefined) };
    const limiter = new Limiter({ config: () => config, store: await make(clock), clock, tiers });
    const admitted = async (tenant: string) =>
      (await Promise.all(Array.from({ length: 6 }, (_, i) => limiter.decide(take(tenant, `${tenant}-${i}`))))).filter((d) => !d.overLimit).length;
    expect(await admitted('big')).toBe(4);
    expect(await admitted('small')).toBe(2);
    const d = await limiter.decide(take('big', 'another'));
    expect([d.overLimit, d.descriptors[0]!.tier]).toEqual([true, 'enterprise']);
  });
});

describe('tiers assign on an in_flight rule, through the service', () => {
  const ADMIN = 'admin-credential-for-tests';
  let s: TestService;
  let env: NodeJS.ProcessEnv;
  beforeAll(async () => {
    s = await startTestService({ configDir: configDir({ 'k.yaml': CONFIG }), realClock: true, env: { TOLLGATE_ADMIN_TOKEN: ADMIN } });
    env = { TOLLGATE_ADMIN_TOKEN: ADMIN, TOLLGATE_URL: `http://127.0.0.1:${s.service.adminPort}` };
  });
  afterAll(async () => {
    await s?.close();
  });
  const rls = (tenant: string, id: string): RlsRequest => ({
    domain: 'k',
    descriptors: [
      {
        entries: [
          { key: 'tenant', value: tenant },
          { key: 'request_id', value: id },
        ],
      },
    ],
  });
  const admitted = async (tenant: string, n: number) =>
    (await Promise.all(Array.from({ length: n }, (_, i) => s.rls.call(rls(tenant, `${tenant}-${i}-${Math.random()}`))))).filter((r) => r.overall_code === 'OK')
      .length;

  it('moves a tenant to its tier at run time, and names the rules it changes', async () => {
    expect(await admitted('acme', 6)).toBe(2);
    const assign = await runCli(['tiers', 'assign', '--token', 'globex', 'enterprise'], env);
    expect([assign.code, assign.stdout.trim()]).toEqual([0, `${fingerprint('globex')} → enterprise (k/tenant)`]);
    expect(await admitted('globex', 6)).toBe(4);
    const explained = await runCli(['explain', '--url', `http://127.0.0.1:${s.service.httpPort}`, '--json', 'k', 'tenant=globex', 'request_id=x'], env);
    expect(JSON.parse(explained.stdout).descriptors[0].tier).toBe('enterprise');
    // A give-back, explained by the service: its op, and nothing first to reject.
    const back = await runCli(['explain', '--url', `http://127.0.0.1:${s.service.httpPort}`, '--json', 'k', 'tenant=globex', 'request_id=x', '@hits=-1'], env);
    expect(JSON.parse(back.stdout).descriptors[0]).toMatchObject({ op: 'giveBack', firstToReject: null });
  });

  it('says so, and exits 1, when no rule has limits for the tier', async () => {
    const assign = await runCli(['tiers', 'assign', '--token', 'initech', 'gold'], env);
    expect(assign.code).toBe(1);
    expect(assign.stderr).toContain('no rule has tier_limits for tier gold');
  });
});
