import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';

// deploy/kubernetes/envoy-gateway/ai-gateway-values.yaml, given to Helm after Envoy AI Gateway's base values and
// its token-limit add-on, must leave Tollgate's image on the rate-limit container and AI Gateway's extension
// settings in place. Helm coalesces values files in order: maps merge key by key, anything else (a list, a
// string) is replaced whole by the later file. The add-on's shape (its examples/token_ratelimit/
// envoy-gateway-values-addon.yaml: a strategic-merge patch naming envoyproxy/ratelimit's image, under `config`)
// and the base's extension keys are written here as facts.

type Values = Record<string, unknown>;
const isMap = (v: unknown): v is Values => typeof v === 'object' && v !== null && !Array.isArray(v);
function coalesce(a: Values, b: Values): Values {
  const out: Values = { ...a };
  for (const [k, v] of Object.entries(b)) out[k] = isMap(v) && isMap(a[k]) ? coalesce(a[k] as Values, v) : v;
  return out;
}
const patch = (image: string) => ({
  rateLimitDeployment: {
    patch: {
      type: 'StrategicMerge',
      value: { spec: { template: { spec: { containers: [{ name: 'envoy-ratelimit', imagePullPolicy: 'IfNotPresent', image }] } } } },
    },
  },
});
const base: Values = {
  config: { envoyGateway: { extensionApis: { enableEnvoyPatchPolicy: true, enableBackend: true }, extensionManager: { service: { fqdn: { port: 1063 } } } } },
};
const addon: Values = { config: { provider: { kubernetes: patch('docker.io/envoyproxy/ratelimit:60d8e81b') } } };
const addonUnderEnvoyGateway: Values = { config: { envoyGateway: { provider: { kubernetes: patch('docker.io/envoyproxy/ratelimit:60d8e81b') } } } };
const ours = parse(readFileSync('deploy/kubernetes/envoy-gateway/ai-gateway-values.yaml', 'utf8')) as Values;
const version = (JSON.parse(readFileSync('package.json', 'utf8')) as { version: string }).version;

const containers = (v: Values, at: string[]): { image: string }[] => {
  let node: unknown = v;
  for (const k of [...at, 'kubernetes', 'rateLimitDeployment', 'patch', 'value', 'spec', 'template', 'spec', 'containers']) node = (node as Values)?.[k];
  return node as { image: string }[];
};

describe("the Helm values for Tollgate under AI Gateway's token-limit add-on", () => {
  it.each([
    ['where the add-on writes its patch today (config.provider)', addon, ['config', 'provider']],
    ["where Envoy Gateway's chart reads it (config.envoyGateway.provider)", addonUnderEnvoyGateway, ['config', 'envoyGateway', 'provider']],
  ])('%s: the container is Tollgate, version of package.json', (_name, add, at) => {
    const merged = coalesce(coalesce(base, add), ours);
    expect(containers(merged, at as string[])).toEqual([
      { name: 'envoy-ratelimit', imagePullPolicy: 'IfNotPresent', image: `tollgate:${version}`, env: expect.arrayContaining([expect.anything()]) },
    ]);
  });

  it("keeps AI Gateway's extensionManager and extensionApis", () => {
    const merged = coalesce(coalesce(base, addon), ours) as { config: { envoyGateway: Values } };
    expect(merged.config.envoyGateway.extensionApis).toEqual({ enableEnvoyPatchPolicy: true, enableBackend: true });
    expect(merged.config.envoyGateway.extensionManager).toEqual({ service: { fqdn: { port: 1063 } } });
  });
});
