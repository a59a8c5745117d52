import { describe, expect, it } from 'vitest';
import { loadConfigDir } from '../../src/config/load.js';
import { matchRule } from '../../src/config/match.js';

// examples/: descriptor configs for common setups. Each loads, and does what its comments say.
const config = loadConfigDir('examples');
const limitsOf = (domain: string, ...entries: [string, string][]): string | undefined => {
  const rule = matchRule(
    config.domains.get(domain)!,
    entries.map(([key, value]) => ({ key, value })),
  );
  if (!rule) return undefined;
  return rule.unlimited ? 'unlimited' : `${rule.limits.map((l) => `${l.requestsPerUnit}/${l.unit}`).join('+')}${rule.shadow ? ' shadow' : ''}`;
};

describe('examples/', () => {
  it('loads as one directory: eight domains, no notes', () => {
    expect([...config.domains.keys()].sort()).toEqual(['edge', 'inflight', 'llm', 'paths', 'rollout', 'saas', 'tenants', 'users']);
    expect([...config.domains.values()].flatMap((d) => d.notes)).toEqual([]);
  });

  it('per-ip.yaml: each address its own counters, the uptime checker unlimited', () => {
    expect(limitsOf('edge', ['remote_address', '203.0.113.7'])).toBe('20/second+5000/hour');
    expect(limitsOf('edge', ['remote_address', '10.0.0.5'])).toBe('unlimited');
  });

  it('per-path.yaml: exact beats prefix beats any', () => {
    expect(limitsOf('paths', ['path', '/login'])).toBe('30/minute');
    expect(limitsOf('paths', ['path', '/search?q=x'])).toBe('5/second');
    expect(limitsOf('paths', ['path', '/other'])).toBe('100/second');
  });

  it('per-user-header.yaml, nested.yaml', () => {
    expect(limitsOf('users', ['user', 'u1'])).toBe('10/second+20000/day');
    expect(limitsOf('tenants', ['tenant', 'acme'], ['user', 'u1'])).toBe('50/second');
    expect(limitsOf('tenants', ['tenant', 'other'], ['user', 'u1'])).toBe('10/second');
    expect(limitsOf('tenants', ['tenant', 'other'])).toBe('200/second');
  });

  it('shadow-rollout.yaml, tiers.yaml', () => {
    expect(limitsOf('rollout', ['generic_key', 'checkout'], ['api_key', 'k'])).toBe('5/second shadow');
    expect(limitsOf('rollout', ['generic_key', 'browse'], ['api_key', 'k'])).toBe('50/second');
    const saas = config.domains.get('saas')!;
    expect(saas.tokenKey).toBe('api_key');
    const rule = matchRule(saas, [{ key: 'api_key', value: 'k' }])!;
    expect([...rule.tierLimits.keys()]).toEqual(['pro', 'enterprise']);
  });

  it('in-flight.yaml: 20 requests at once per tenant (200 in the enterprise tier), a 30 s lease renewed up to 15 minutes, held by request id', () => {
    const domain = config.domains.get('inflight')!;
    const rule = matchRule(domain, [{ key: 'tenant', value: 'acme' }])!;
    expect(rule.inFlight).toEqual({ limit: 20, leaseMs: 30_000, maxHoldMs: 900_000, requestKey: 'request_id', tiers: new Map([['enterprise', 200]]) });
    expect(rule.limits.map((l) => [l.algorithm, l.requestsPerUnit, l.windowSeconds])).toEqual([['in_flight', 20, 30]]);
    expect(rule.tierLimits.get('enterprise')!.map((l) => [l.algorithm, l.requestsPerUnit, l.windowSeconds])).toEqual([['in_flight', 200, 30]]);
    expect([...domain.slotKeys]).toEqual(['request_id']);
  });

  it('llm-budgets.yaml: a calendar month per tenant, an hour per tenant and model with reservations, both charged', () => {
    expect(limitsOf('llm', ['tenant', 't1'])).toBe('50000000/month');
    expect(limitsOf('llm', ['tenant', 't1'], ['model', 'm'])).toBe('1000000/hour');
    const llm = config.domains.get('llm')!;
    expect(llm.rules.map((r) => r.settlementKey)).toEqual(['settle_id', 'settle_id']);
    expect(llm.headers).toMatchObject({ window: 'tightest', units: 'tokens' });
    expect(llm.rules.map((r) => [r.id, r.charge, r.reservationKey, r.limits[0]!.calendar])).toEqual([
      ['tenant', true, 'request_id', 1],
      ['tenant.model', true, 'request_id', 0],
    ]);
    expect(llm.rules[0]!.tierLimits.get('enterprise')![0]!.requestsPerUnit).toBe(10_000_000_000);
  });
});
