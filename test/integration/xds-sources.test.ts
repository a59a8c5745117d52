import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { afterEach, describe, expect, it } from 'vitest';
import { fingerprint } from '../../src/fingerprint.js';
import { AdsServer, type Resource } from '../helpers/ads-server.js';
import { scrape } from '../helpers/metrics.js';
import { capturingLogger, type RlsRequest, startTestService, type TestService } from '../helpers/service.js';
import { within } from '../helpers/time.js';

// Several control planes, one service (issue 63, item 3): Envoy Gateway's xDS server (node envoy-ratelimit, as
// its rate-limit Deployment names it) and Envoy AI Gateway's (node envoy-ai-gateway-ratelimit, port 18002:
// ai-gateway internal/ratelimit/runner/runner.go at v1.1.0), and a config directory beside them.

const EG_NODE = 'envoy-ratelimit';
const AI_NODE = 'envoy-ai-gateway-ratelimit';
/** Envoy Gateway's shape: one resource per domain, a descriptor per rule. */
const egConfig = (perMinute: number, domain = 'eg-domain'): Resource => ({
  config: { name: domain, domain, descriptors: [{ key: 'client', rate_limit: { unit: 'MINUTE', requests_per_unit: perMinute } }] },
});
/** What AI Gateway's QuotaPolicy translator makes of a 10-per-hour backend quota (its internal/ratelimit/translator/
 * translator.go at v1.1.0, the e2e policy tests/e2e/testdata/backend_quota_ratelimit.yaml): one fixed domain, a
 * backend_name → model_name_override chain, quota_mode on every limit. */
const aiQuota = (extra: Record<string, unknown>[] = []): Resource => ({
  config: {
    name: 'ai-gateway-quota',
    domain: 'ai-gateway-quota',
    descriptors: [
      {
        key: 'backend_name',
        value: 'default/envoy-ai-gateway-quota-ratelimit-testupstream',
        descriptors: [{ key: 'model_name_override', value: 'quota-test-model', rate_limit: { unit: 'HOUR', requests_per_unit: 10 }, quota_mode: true }],
      },
      ...extra,
    ],
  },
});
const egReq = (client: string): RlsRequest => ({ domain: 'eg-domain', descriptors: [{ entries: [{ key: 'client', value: client }] }] });
const aiReq = (hits: number): RlsRequest => ({
  domain: 'ai-gateway-quota',
  descriptors: [
    {
      entries: [
        { key: 'backend_name', value: 'default/envoy-ai-gateway-quota-ratelimit-testupstream' },
        { key: 'model_name_override', value: 'quota-test-model' },
      ],
      hits_addend: { value: hits },
    },
  ],
});
const limitOf = async (t: TestService, r: RlsRequest): Promise<number | 'no config'> => {
  try {
    return (await t.rls.call(r)).statuses[0]?.current_limit?.requests_per_unit ?? 0;
  } catch (err) {
    if ((err as grpc.ServiceError).code === grpc.status.UNAVAILABLE) return 'no config';
    throw err;
  }
};
const readyz = async (t: TestService): Promise<number> => (await fetch(`http://127.0.0.1:${t.service.httpPort}/readyz`)).status;
const fast = ['--xds-backoff-initial', '100ms', '--xds-backoff-max', '400ms', '--xds-connect-retry-interval', '100ms'];

let t: TestService | undefined;
const servers: AdsServer[] = [];
let dir: string | undefined;
afterEach(async () => {
  await t?.close();
  for (const s of servers.splice(0)) s.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
  t = dir = undefined;
});

async function twoServers(): Promise<[AdsServer, AdsServer]> {
  const eg = new AdsServer();
  const ai = new AdsServer();
  servers.push(eg, ai);
  await Promise.all([eg.start(), ai.start()]);
  return [eg, ai];
}

describe('several config sources, one service', () => {
  it('Envoy Gateway, AI Gateway and a directory: each owns its domains; a shared claim is refused; one server down', async () => {
    const [eg, ai] = await twoServers();
    dir = mkdtempSync(join(tmpdir(), 'tollgate-sources-'));
    writeFileSync(join(dir, 'own.yaml'), 'domain: own\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: 7 }\n');
    const { logger, lines } = capturingLogger();
    // The flags given more than once; CONFIG_TYPE lists both kinds.
    const args = ['--xds-server-url', `127.0.0.1:${eg.port}`, '--xds-server-url', `127.0.0.1:${ai.port}`, '--xds-node-id', EG_NODE, '--xds-node-id', AI_NODE];
    t = await startTestService({ configDir: dir, args: [...args, ...fast], env: { CONFIG_TYPE: 'GRPC_XDS_SOTW,FILE' }, logger });
    const own: RlsRequest = { domain: 'own', descriptors: [{ entries: [{ key: 'k', value: 'v' }] }] };
    expect(await limitOf(t, own)).toBe(7); // the directory's domain from the start

    eg.push('eg-1', [egConfig(5)]);
    await within(5000, async () => (await limitOf(t!, egReq('a'))) === 5, "Envoy Gateway's domain");
    // AI Gateway's server has sent nothing yet: not ready, and its domain is answered as no config, not admitted.
    expect(await readyz(t)).toBe(503);
    expect(await limitOf(t, aiReq(1))).toBe('no config');
    // Each server was asked with its own node ID.
    expect(eg.received[0]!.request.node?.id).toBe(EG_NODE);
    await within(5000, () => ai.received.length > 0, 'AI Gateway subscribed');
    expect(ai.received[0]!.request.node?.id).toBe(AI_NODE);

    ai.push('ai-1', [aiQuota()]);
    await within(5000, async () => (await limitOf(t!, aiReq(1))) === 10, "AI Gateway's domain");
    await within(5000, async () => (await readyz(t!)) === 200, 'ready once both have sent');

    // AI Gateway's server also claims Envoy Gateway's domain: refused, kept as it was; its own still applies.
    ai.push('ai-2', [aiQuota(), egConfig(99)]);
    await within(5000, () => lines().some((l) => l.msg === 'config domain refused: another config source already serves it, and keeps it'), 'refusal logged');
    expect(await limitOf(t, egReq('b'))).toBe(5);
    const refusal = lines().find((l) => String(l.msg).startsWith('config domain refused'))!;
    expect(refusal).toMatchObject({ domain: fingerprint('eg-domain'), owner: `xDS server 127.0.0.1:${eg.port} (node ${EG_NODE})` });
    // The claimant's lines never name the domain it was refused (the owner's own reloads may: its config says it).
    const claimant = `xDS server 127.0.0.1:${ai.port} (node ${AI_NODE})`;
    expect(JSON.stringify(lines().filter((l) => l.from === claimant))).not.toContain('eg-domain');
    expect(lines().filter((l) => l.from === claimant && l.msg === 'config reloaded').length).toBeGreaterThan(0);

    // Envoy Gateway's server goes away: its domains keep being served, and AI Gateway's keep changing.
    eg.stop();
    ai.push('ai-3', [aiQuota([{ key: 'backend_name', value: 'default/other', rate_limit: { unit: 'HOUR', requests_per_unit: 3 } }])]);
    const other: RlsRequest = { domain: 'ai-gateway-quota', descriptors: [{ entries: [{ key: 'backend_name', value: 'default/other' }] }] };
    await within(5000, async () => (await limitOf(t!, other)) === 3, "AI Gateway's update while Envoy Gateway's server is down");
    expect(await limitOf(t, egReq('c'))).toBe(5);
    expect(await limitOf(t, own)).toBe(7);
  });

  it('beside a directory: files count as files do, xDS as envoyproxy/ratelimit; the directory outranks a server', async () => {
    const [eg] = await twoServers();
    dir = mkdtempSync(join(tmpdir(), 'tollgate-sources-'));
    writeFileSync(join(dir, 'own.yaml'), 'domain: own\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: 2 }\n');
    const args = ['--xds-server-url', `127.0.0.1:${eg.port}`, '--config-poll-ms', '0', ...fast];
    t = await startTestService({ configDir: dir, args, env: { CONFIG_TYPE: 'GRPC_XDS_SOTW,FILE' } });
    eg.push('1', [egConfig(2)]);
    await within(5000, async () => (await limitOf(t!, egReq('probe'))) === 2, 'xDS domain');
    const big = (domain: string, key: string, hits: number): RlsRequest => ({
      domain,
      descriptors: [{ entries: [{ key, value: 'c' }], hits_addend: { value: hits } }],
    });
    // 5 hits on a limit of 2 are refused; counted past the limit only on the domain from xDS.
    for (const [domain, key] of [
      ['own', 'k'],
      ['eg-domain', 'client'],
    ] as const)
      expect((await t.rls.call(big(domain, key, 5))).overall_code).toBe('OVER_LIMIT');
    expect((await t.rls.call(big('own', 'k', 1))).overall_code).toBe('OK');
    expect((await t.rls.call(big('eg-domain', 'client', 1))).overall_code).toBe('OVER_LIMIT');
    // The directory adds the server's domain: listed first, it takes it over.
    writeFileSync(join(dir, 'eg.yaml'), 'domain: eg-domain\ndescriptors:\n  - key: client\n    rate_limit: { unit: minute, requests_per_unit: 11 }\n');
    expect(await t.service.reload()).toBe('reloaded');
    expect(await limitOf(t, egReq('probe'))).toBe(11);
  });

  it('with configs from files only, no xDS gauge is exported', async () => {
    t = await startTestService({});
    expect((await scrape(t.service.httpPort)).text).not.toContain('tollgate_xds_connected');
  });

  it('a domain its owner drops goes to the other source that sends it', async () => {
    const [eg, ai] = await twoServers();
    const { logger, lines } = capturingLogger();
    const args = ['--config-type', 'GRPC_XDS_SOTW', ...fast];
    t = await startTestService({
      args,
      env: { CONFIG_GRPC_XDS_SERVER_URL: `127.0.0.1:${eg.port},127.0.0.1:${ai.port}`, CONFIG_GRPC_XDS_NODE_ID: `${EG_NODE},${AI_NODE}` },
      logger,
    });
    eg.push('1', [egConfig(5)]);
    await within(5000, async () => (await limitOf(t!, egReq('a'))) === 5, 'first owner');
    ai.push('1', [egConfig(8)]);
    await within(5000, () => lines().some((l) => String(l.msg).startsWith('config domain refused')), 'refused');
    expect(await limitOf(t, egReq('a'))).toBe(5);
    eg.push('2', []);
    await within(5000, async () => (await limitOf(t!, egReq('a'))) === 8, 'the other source takes it over');
  });

  it("a refused domain's rules moving to a token bucket are reported by its owner only", async () => {
    const [eg, ai] = await twoServers();
    dir = mkdtempSync(join(tmpdir(), 'tollgate-sources-'));
    const overlay = join(dir, 'overlay.yaml');
    writeFileSync(overlay, 'overlays: []\n');
    const { logger, lines } = capturingLogger();
    const args = ['--config-type', 'GRPC_XDS_SOTW', '--xds-overlay', overlay, '--config-poll-ms', '50', ...fast];
    const env = { CONFIG_GRPC_XDS_SERVER_URL: `127.0.0.1:${eg.port},127.0.0.1:${ai.port}`, CONFIG_GRPC_XDS_NODE_ID: `${EG_NODE},${AI_NODE}` };
    t = await startTestService({ args, env, logger });
    eg.push('1', [egConfig(5)]);
    await within(5000, async () => (await limitOf(t!, egReq('a'))) === 5, 'owner');
    ai.push('1', [egConfig(8)]);
    await within(5000, () => lines().some((l) => String(l.msg).startsWith('config domain refused')), 'refused');
    // Both servers' copies move to a token bucket: each source's own diff says so, and only the owner may name it.
    writeFileSync(overlay, 'overlays:\n  - domain: eg-domain\n    descriptors: [{key: client}]\n    set: {algorithm: token_bucket}\n');
    const moved = () => lines().filter((l) => String(l.msg).startsWith('limits moved') && JSON.stringify(l).includes('eg-domain'));
    await within(5000, () => moved().length > 0, "the owner's line");
    await within(5000, () => lines().filter((l) => l.msg === 'config reloaded').length >= 4, "both sources' reapplies");
    expect(moved().map((l) => l.from)).toEqual([`xDS server 127.0.0.1:${eg.port} (node ${EG_NODE})`]);
  });

  it("serves AI Gateway's QuotaPolicy as envoyproxy/ratelimit does: 1 before, the tokens at stream end, then 429", async () => {
    const [, ai] = await twoServers();
    t = await startTestService({ args: ['--config-type', 'GRPC_XDS_SOTW', '--xds-server-url', `127.0.0.1:${ai.port}`, '--xds-node-id', AI_NODE, ...fast] });
    ai.push('1', [aiQuota()]);
    await within(5000, async () => (await limitOf(t!, aiReq(1))) === 10, 'quota config');
    // limitOf charged 1 per try; start the e2e's sequence on a fresh hour's window instead of counting tries.
    t.clock.advance(3_600_000);
    // ai-gateway tests/e2e/backend_quota_ratelimit_test.go: a 20-token answer leaves the counter at 21, and the
    // next request is refused (quota_mode alone: over when every quota-mode descriptor is, src/service/ratelimit.go).
    expect((await t.rls.call(aiReq(1))).overall_code).toBe('OK');
    expect((await t.rls.call(aiReq(20))).statuses[0]!.limit_remaining).toBe(0);
    const next = await t.rls.call(aiReq(1));
    expect(next.overall_code).toBe('OVER_LIMIT');
    expect(next.statuses[0]!.code).toBe('OVER_LIMIT');
    // Bucket rules under the model, as the translator names them (keys with '|'; a Distinct header key-only; the
    // default bucket last): each answers as its own limit.
    const bucket = (key: string, value?: string, extra: Record<string, unknown> = {}) => ({ key, ...(value && { value }), ...extra });
    const rl = (n: number) => ({ rate_limit: { unit: 'HOUR', requests_per_unit: n }, quota_mode: true });
    const premium = 'rule-0-x-tenant-id|premium-tenant-match-0';
    const model = {
      key: 'model_name_override',
      value: 'gpt-4',
      descriptors: [
        bucket(premium, premium, rl(50_000)),
        bucket('rule-1-x-tenant-id-match-0', undefined, { ...rl(5000), shadow_mode: true }),
        bucket('rule-2-match--1', 'rule-2-match--1', rl(10_000)),
      ],
    };
    ai.push('2', [
      { config: { name: 'ai-gateway-quota', domain: 'ai-gateway-quota', descriptors: [{ key: 'backend_name', value: 'default/b', descriptors: [model] }] } },
    ]);
    const tenant = (key: string, value: string): RlsRequest => ({
      domain: 'ai-gateway-quota',
      descriptors: [
        {
          entries: [
            { key: 'backend_name', value: 'default/b' },
            { key: 'model_name_override', value: 'gpt-4' },
            { key, value },
          ],
          hits_addend: { value: 0 },
        },
      ],
    });
    await within(5000, async () => (await limitOf(t!, tenant(premium, premium))) === 50_000, 'bucket rules');
    expect(await limitOf(t, tenant('rule-1-x-tenant-id-match-0', 'acme'))).toBe(5000);
    expect(await limitOf(t, tenant('rule-2-match--1', 'rule-2-match--1'))).toBe(10_000);
  });
});
