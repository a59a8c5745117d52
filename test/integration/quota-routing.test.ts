import { afterEach, describe, expect, it } from 'vitest';
import { envoyCalls, loadEnvoyCallSetup } from '../../src/envoy/routes.js';
import { fingerprint } from '../../src/fingerprint.js';
import { configDir, type RlsRequest, type RlsResponse, startTestService, type TestService } from '../helpers/service.js';

// Quota-aware routing (issue 63, item 5): with RESPONSE_DYNAMIC_METADATA, the answer lists the backends whose quota
// is not spent (`passedBackends`, envoyproxy/ratelimit's open PR #1243), for a request whose descriptors name several
// backends' quotas (Envoy AI Gateway's proposal 009). The config is AI Gateway's QuotaPolicy shape (its
// internal/ratelimit/translator/translator.go at v1.1.0): backend_name → model_name_override, quota_mode on each.

const CONFIG = `domain: ai-gateway-quota
descriptors:
  - key: backend_name
    value: default/east
    descriptors:
      - {key: model_name_override, value: gpt-4, quota_mode: true, rate_limit: {unit: hour, requests_per_unit: 2}}
  - key: backend_name
    value: default/west
    descriptors:
      - {key: model_name_override, value: gpt-4, quota_mode: true, rate_limit: {unit: hour, requests_per_unit: 3}}
      - {key: model_name_override, quota_mode: true, rate_limit: {unit: hour, requests_per_unit: 100}}
  - key: plain
    rate_limit: {unit: hour, requests_per_unit: 100}
`;
const pair = (backend: string, model = 'gpt-4') => ({
  entries: [
    { key: 'backend_name', value: backend },
    { key: 'model_name_override', value: model },
  ],
});
const req = (...descriptors: RlsRequest['descriptors']): RlsRequest => ({ domain: 'ai-gateway-quota', descriptors });
type Meta = { fields: Record<string, { listValue?: { values: { structValue: { fields: Record<string, { stringValue: string }> } }[] } }> };
const passed = (r: RlsResponse): string[][] | undefined =>
  (r as RlsResponse & { dynamic_metadata?: Meta }).dynamic_metadata?.fields.passedBackends?.listValue?.values.map((v) => [
    v.structValue.fields.backend_name!.stringValue,
    v.structValue.fields.model_name_override!.stringValue,
  ]);

let t: TestService | undefined;
afterEach(async () => {
  await t?.close();
  t = undefined;
});

describe('passedBackends: the backends still under quota, for Envoy to route among', () => {
  it('lists each backend until its quota is spent; the request is refused once every one is', async () => {
    t = await startTestService({ configDir: configDir({ 'quota.yaml': CONFIG }), env: { RESPONSE_DYNAMIC_METADATA: 'true' } });
    // What Envoy sends for a request to the shipped envoy/envoy-quota-routing.yaml (its routes, modelled).
    const setup = loadEnvoyCallSetup('envoy/envoy-quota-routing.yaml');
    const calls = envoyCalls(setup, { method: 'POST', path: '/v1/chat/completions', headers: { host: 'llm', 'x-ai-eg-model': 'gpt-4' } })!;
    const both = req(...calls.request.map((d) => ({ entries: d.entries })));
    expect(both.descriptors).toEqual([pair('default/east'), pair('default/west')]);
    expect(setup.domain).toBe(both.domain);
    const first = await t.rls.call(both);
    expect(first.overall_code).toBe('OK');
    expect(passed(first)).toEqual([
      ['default/east', 'gpt-4'],
      ['default/west', 'gpt-4'],
    ]);
    await t.rls.call(both); // east: 2 of 2
    const third = await t.rls.call(both); // east over (quota mode: the request still passes), west 3 of 3
    expect(third.overall_code).toBe('OK');
    expect(passed(third)).toEqual([['default/west', 'gpt-4']]);
    const spent = await t.rls.call(both);
    expect(spent.overall_code).toBe('OVER_LIMIT'); // every quota-mode descriptor over
    expect(passed(spent)).toBeUndefined(); // no list at all, as #1243 answers
  });

  it('a value the request chose is its fingerprint; a descriptor with neither key, or no quota descriptor, lists nothing', async () => {
    t = await startTestService({ configDir: configDir({ 'quota.yaml': CONFIG }), env: { RESPONSE_DYNAMIC_METADATA: 'true' } });
    const chosen = await t.rls.call(req(pair('default/west', 'secret-model-7'), { entries: [{ key: 'plain', value: 'x' }] }));
    expect(passed(chosen)).toEqual([['default/west', `fp:${fingerprint('secret-model-7')}`]]);
    expect(JSON.stringify(chosen)).not.toContain('secret-model-7');
    expect(passed(await t.rls.call(req({ entries: [{ key: 'plain', value: 'x' }] })))).toBeUndefined();
  });

  it('off without RESPONSE_DYNAMIC_METADATA, as every dynamic metadata is', async () => {
    t = await startTestService({ configDir: configDir({ 'quota.yaml': CONFIG }) });
    const r = (await t.rls.call(req(pair('default/east')))) as RlsResponse & { dynamic_metadata?: unknown };
    expect(r.dynamic_metadata ?? undefined).toBeUndefined();
  });
});
