import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RedisCluster, type RedisServer, startRedis, startRedisCluster } from '../helpers/redis.js';
import { configDir, type RlsRequest, type RlsResponse, repeat, startTestService, type TestService } from '../helpers/service.js';

/** envoyproxy/ratelimit's newer answers (issue 21), on every store: quota_mode (its src/service/ratelimit.go),
 * share_threshold, shadow_mode statuses, unlimited's remaining, and RESPONSE_DYNAMIC_METADATA. Hourly windows,
 * so a run on the real clock (Redis) never straddles one. */

const CONFIG = `
domain: compat
descriptors:
  - key: soft_a
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 2}
    metadata: {quota: {name: soft_a}, owner: first}
  - key: soft_b
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 4, algorithm: token_bucket}
  - key: hard
    rate_limit: {unit: hour, requests_per_unit: 100}
    metadata: {quota: {tier: hard}, owner: second}
  - key: files
    value: "files/*/v*"
    share_threshold: true
    algorithm: sliding_window
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: free
    rate_limit: {unlimited: true}
`;

const req = (...descriptors: [string, string][][]): RlsRequest => ({
  domain: 'compat',
  descriptors: descriptors.map((entries) => ({ entries: entries.map(([key, value]) => ({ key, value })) })),
});
const codes = (rs: RlsResponse[]): string[] => rs.map((r) => r.overall_code);

interface StoreCase {
  name: string;
  start: () => Promise<{ args: string[]; stop: () => Promise<void> }>;
}

const STORES: StoreCase[] = [
  { name: 'memory', start: async () => ({ args: [], stop: async () => undefined }) },
  {
    name: 'redis',
    start: async () => {
      const redis: RedisServer = await startRedis();
      return { args: ['--store', 'redis', '--redis-url', redis.url, '--redis-timeout-ms', '1000'], stop: () => redis.stop() };
    },
  },
  {
    name: 'redis cluster',
    start: async () => {
      const cluster: RedisCluster = await startRedisCluster();
      return { args: ['--store', 'redis', '--redis-type', 'cluster', '--redis-url', cluster.url, '--redis-timeout-ms', '1000'], stop: () => cluster.stop() };
    },
  },
];

describe.each(STORES)('envoyproxy/ratelimit answers, $name store', (store) => {
  let t: TestService;
  let stop: () => Promise<void> = async () => undefined;
  beforeAll(async () => {
    const s = await store.start();
    stop = s.stop;
    t = await startTestService({
      configDir: configDir({ 'compat.yaml': CONFIG }),
      realClock: store.name !== 'memory',
      args: [...s.args, '--response-dynamic-metadata', 'true'],
    });
  }, 60_000);
  afterAll(async () => {
    await t?.close();
    await stop();
  });

  it('quota_mode: OVER_LIMIT only once every quota-mode descriptor is over; until then the rest is counted', async () => {
    // Each descriptor's own client, so on a Cluster the four live in different slots.
    const id = `${store.name}-${Math.random()}`;
    const all = req([['soft_a', `a-${id}`]], [['soft_b', `b-${id}`]], [['hard', `h-${id}`]]);
    const rs = await repeat(t.rls, all, 5);
    expect(codes(rs)).toEqual(['OK', 'OK', 'OK', 'OK', 'OVER_LIMIT']);
    // Third and fourth: soft_a is over (its status says so) but soft_b has room, so the request passes.
    expect(rs[2]!.statuses.map((s) => s.code)).toEqual(['OVER_LIMIT', 'OK', 'OK']);
    expect(rs[4]!.statuses.map((s) => s.code)).toEqual(['OVER_LIMIT', 'OVER_LIMIT', 'OK']);
    // The four admitted requests were counted on hard; the rejected fifth was not.
    const peek = await t.rls.call({
      ...req([['hard', `h-${id}`]]),
      descriptors: [{ entries: [{ key: 'hard', value: `h-${id}` }], hits_addend: { value: 0 } }],
    });
    expect(peek.statuses[0]!.limit_remaining).toBe(96);
    // One quota-mode descriptor alone: over is over.
    const alone = await repeat(t.rls, req([['soft_a', `alone-${id}`]]), 3);
    expect(codes(alone)).toEqual(['OK', 'OK', 'OVER_LIMIT']);
  });

  it('a normal descriptor over its limit rejects whatever the quota-mode ones say', async () => {
    const id = `${store.name}-${Math.random()}`;
    const blocked = {
      ...req([['soft_a', `a-${id}`]], [['hard', `h-${id}`]]),
      descriptors: [{ entries: [{ key: 'soft_a', value: `a-${id}` }] }, { entries: [{ key: 'hard', value: `h-${id}` }], hits_addend: { value: 101 } }],
    };
    const r = await t.rls.call(blocked);
    expect(r.overall_code).toBe('OVER_LIMIT');
    expect(r.statuses.map((s) => s.code)).toEqual(['OK', 'OVER_LIMIT']);
  });

  it('share_threshold: every value a wildcard matches counts on one counter (sliding window)', async () => {
    const tag = Math.random().toString(36).slice(2);
    const rs = [];
    for (const v of [`files/${tag}/v1`, `files/x/v2`, `files/${tag}/v`, `files/other/v9`]) rs.push(await t.rls.call(req([['files', v]])));
    expect(codes(rs)).toEqual(['OK', 'OK', 'OK', 'OVER_LIMIT']);
    expect((await t.rls.call(req([['files', 'files/x/nov']]))).statuses[0]!.current_limit).toBeNull(); // no match
  });

  it('an unlimited descriptor answers OK with 4294967295 remaining, next to a limited one', async () => {
    const r = await t.rls.call(req([['free', 'x']], [['hard', `h-${Math.random()}`]]));
    expect(r.statuses.map((s) => [s.code, s.limit_remaining])).toEqual([
      ['OK', 4294967295],
      ['OK', 99],
    ]);
  });

  it('RESPONSE_DYNAMIC_METADATA: domain, descriptors (values as fingerprints), merged metadata of those that passed', async () => {
    const secret = `Bearer raw-${Math.random()}`;
    const res = await fetch(`http://127.0.0.1:${t.service.httpPort}/json`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        domain: 'compat',
        hitsAddend: 2,
        descriptors: [
          { entries: [{ key: 'hard', value: secret }] },
          { entries: [{ key: 'soft_a', value: secret }] },
          { entries: [{ key: 'unknown', value: secret }] },
        ],
      }),
    });
    const body = (await res.json()) as { dynamicMetadata: Record<string, unknown> };
    const text = JSON.stringify(body);
    expect(text).not.toContain('raw-');
    expect(text).not.toContain('"unknown');
    const meta = body.dynamicMetadata as { domain: string; hitsAddend: number; descriptors: { entries: string[] }[]; metadata: unknown };
    expect(meta.domain).toBe('compat');
    expect(meta.hitsAddend).toBe(2);
    expect(meta.descriptors).toHaveLength(3);
    expect(meta.descriptors[0]!.entries[0]).toMatch(/^hard=fp:[0-9a-f]{32}$/);
    expect(meta.descriptors[2]!.entries[0]).toMatch(/^fp:[0-9a-f]{32}=fp:[0-9a-f]{32}$/);
    // Both passed: merged, mappings key by key, the first written wins a plain key.
    expect(meta.metadata).toEqual({ quota: { tier: 'hard', name: 'soft_a' }, owner: 'second' });
    // Over gRPC too, as a google.protobuf.Struct.
    const g = (await t.rls.call(req([['hard', secret]]))) as RlsResponse & { dynamic_metadata?: { fields: Record<string, { stringValue?: string }> } };
    expect(g.dynamic_metadata?.fields.domain?.stringValue).toBe('compat');
    expect(JSON.stringify(g.dynamic_metadata)).not.toContain('raw-');
  });
});

describe('QUOTA_MODE and MERGE_DOMAIN_CONFIG (envoyproxy/ratelimit settings)', () => {
  const A = 'domain: merged\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1}\n';
  const B = 'domain: merged\ndescriptors:\n  - key: b\n    rate_limit: {unit: hour, requests_per_unit: 2}\n';
  let t: TestService | undefined;
  afterAll(async () => t?.close());

  it('QUOTA_MODE=true puts every descriptor in quota mode: OVER_LIMIT only when all are over', async () => {
    t = await startTestService({ configDir: configDir({ 'a.yaml': A, 'b.yaml': B }), env: { QUOTA_MODE: 'true', MERGE_DOMAIN_CONFIG: 'true' } });
    const both: RlsRequest = { domain: 'merged', descriptors: [{ entries: [{ key: 'a', value: 'x' }] }, { entries: [{ key: 'b', value: 'x' }] }] };
    const rs = await repeat(t.rls, both, 3);
    expect(codes(rs)).toEqual(['OK', 'OK', 'OVER_LIMIT']);
    expect(rs[1]!.statuses.map((s) => s.code)).toEqual(['OVER_LIMIT', 'OK']);
  });

  it('QUOTA_MODE: a descriptor nothing limits counts as a quota descriptor that passes (envoyproxy/ratelimit ratelimit.go)', async () => {
    const withUnmatched: RlsRequest = {
      domain: 'merged',
      descriptors: [{ entries: [{ key: 'a', value: 'u' }] }, { entries: [{ key: 'nothing', value: 'u' }] }],
    };
    const rs = await repeat(t!.rls, withUnmatched, 3);
    expect(codes(rs)).toEqual(['OK', 'OK', 'OK']);
    expect(rs[2]!.statuses.map((s) => s.code)).toEqual(['OVER_LIMIT', 'OK']);
  });

  it('a quota-mode descriptor in shadow mode passes: the other quota-mode one alone over does not reject', async () => {
    const shadowQuota =
      'domain: sq\ndescriptors:\n  - key: s\n    quota_mode: true\n    shadow_mode: true\n    rate_limit: {unit: hour, requests_per_unit: 1}\n  - ' +
      'key: q\n    quota_mode: true\n    rate_limit: {unit: hour, requests_per_unit: 1}\n';
    const s = await startTestService({ configDir: configDir({ 'sq.yaml': shadowQuota }) });
    try {
      const both: RlsRequest = { domain: 'sq', descriptors: [{ entries: [{ key: 's', value: 'x' }] }, { entries: [{ key: 'q', value: 'x' }] }] };
      const rs = await repeat(s.rls, both, 3);
      expect(codes(rs)).toEqual(['OK', 'OK', 'OK']);
      expect(rs[2]!.statuses.map((x) => x.code)).toEqual(['OK', 'OVER_LIMIT']);
    } finally {
      await s.close();
    }
  });

  it('merged files may replace limits of each other (envoyproxy/ratelimit never checks replaces), not reuse a name', async () => {
    const named = 'domain: merged\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1, name: a-hourly}\n';
    const replacing = 'domain: merged\ndescriptors:\n  - key: b\n    rate_limit: {unit: hour, requests_per_unit: 9, replaces: [{name: a-hourly}]}\n';
    const s = await startTestService({ configDir: configDir({ 'a.yaml': named, 'b.yaml': replacing }), env: { MERGE_DOMAIN_CONFIG: 'true' } });
    try {
      const both: RlsRequest = { domain: 'merged', descriptors: [{ entries: [{ key: 'a', value: 'x' }] }, { entries: [{ key: 'b', value: 'x' }] }] };
      expect(codes(await repeat(s.rls, both, 3))).toEqual(['OK', 'OK', 'OK']); // a-hourly (1) is replaced
    } finally {
      await s.close();
    }
    const again = 'domain: merged\ndescriptors:\n  - key: c\n    rate_limit: {unit: hour, requests_per_unit: 2, name: a-hourly}\n';
    await expect(startTestService({ configDir: configDir({ 'a.yaml': named, 'c.yaml': again }), env: { MERGE_DOMAIN_CONFIG: 'true' } })).rejects.toThrow(
      /duplicate limit name "a-hourly"/,
    );
  });

  it('metadata keys such as __proto__ and constructor are plain keys: nothing reaches Object.prototype', async () => {
    const odd =
      'domain: odd\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n    metadata:\n      "__proto__": {polluted: ' +
      'yes}\n      constructor: {x: 1}\n      toString: fine\n';
    const s = await startTestService({ configDir: configDir({ 'odd.yaml': odd }), args: ['--response-dynamic-metadata', 'true'] });
    try {
      const r = (await s.rls.call({ domain: 'odd', descriptors: [{ entries: [{ key: 'k', value: 'v' }] }] })) as RlsResponse & {
        dynamic_metadata?: { fields: Record<string, { structValue?: { fields: Record<string, unknown> } }> };
      };
      expect(r.overall_code).toBe('OK');
      expect(({} as Record<string, unknown>).polluted).toBeUndefined();
      expect(Object.keys(r.dynamic_metadata!.fields.metadata!.structValue!.fields)).toEqual(expect.arrayContaining(['constructor', 'toString']));
    } finally {
      await s.close();
    }
  });

  it('without MERGE_DOMAIN_CONFIG two files of one domain are refused, naming the setting', async () => {
    await expect(startTestService({ configDir: configDir({ 'a.yaml': A, 'b.yaml': B }) })).rejects.toThrow(/already defined in .*MERGE_DOMAIN_CONFIG=true/);
  });

  it('merged, the same top-level key and value in two files is still refused, with both places', async () => {
    const again = 'domain: merged\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 5}\n';
    await expect(startTestService({ configDir: configDir({ 'a.yaml': A, 'c.yaml': again }), env: { MERGE_DOMAIN_CONFIG: 'true' } })).rejects.toThrow(
      /c\.yaml:3:1: descriptors: duplicate descriptor a in domain "merged" \(also at .*a\.yaml:3\)/,
    );
  });
});
