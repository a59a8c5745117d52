import { readFileSync } from 'node:fs';
import { parse, parseAllDocuments } from 'yaml';
import type { Resource } from './ads-server.js';
import type { RlsRequest } from './service.js';

/** Envoy Gateway's side, from its own files copied under test/fixtures/envoy-gateway/: the rate-limit
 * Deployment it renders (its environment) and the RateLimitConfigs it serves over xDS. */

const DIR = 'test/fixtures/envoy-gateway';

/** The env of the rate-limit container of one of Envoy Gateway's Deployment files, name → value (a
 * valueFrom entry has no value here and is left out). */
export function deploymentEnv(file: 'deployment-default.yaml' | 'deployment-redis-tls.yaml'): Record<string, string> {
  const doc = parseAllDocuments(readFileSync(`${DIR}/${file}`, 'utf8'))[0]!.toJS() as {
    spec: { template: { spec: { containers: { name: string; env: { name: string; value?: string }[] }[] } } };
  };
  const container = doc.spec.template.spec.containers.find((c) => c.name === 'envoy-ratelimit')!;
  return Object.fromEntries(container.env.filter((e) => e.value !== undefined).map((e) => [e.name, e.value!]));
}

export interface EgConfig {
  name: string;
  domain: string;
  descriptors: unknown[];
}

/** The RateLimitConfigs of ratelimit-configs.yaml (the listener's domain, then the shared rule's). */
export function egConfigs(): EgConfig[] {
  return parse(readFileSync(`${DIR}/ratelimit-configs.yaml`, 'utf8')) as EgConfig[];
}

export const egResources = (): Resource[] => egConfigs().map((config) => ({ config: config as unknown as Record<string, unknown> }));

export const LISTENER_DOMAIN = 'envoy-gateway/gateway-1/http';
export const SHARED_DOMAIN = 'default/policy-for-route';
const ROUTE = 'httproute/default/httproute-1/rule/0/match/0/gateway_envoyproxy_io';

/** What Envoy sends for a request with `x-user-id: <user>` on the route: the generic_key of the route and the
 * request_headers action of the distinct header rule (ratelimit.go's buildRouteRateLimits). */
export function userRequest(user: string): RlsRequest {
  return {
    domain: LISTENER_DOMAIN,
    descriptors: [
      {
        entries: [
          { key: ROUTE, value: ROUTE },
          { key: 'rule-0-match-0', value: user },
        ],
      },
    ],
  };
}

/** The shared rule's call, from the filter of its own domain: masked and distinct source address. */
export function sharedRequest(ip: string): RlsRequest {
  const rule = `${SHARED_DOMAIN}/rule/1`;
  return {
    domain: SHARED_DOMAIN,
    descriptors: [
      {
        entries: [
          { key: rule, value: rule },
          { key: 'masked_remote_address', value: '10.0.0.0/8' },
          { key: 'remote_address', value: ip },
        ],
      },
    ],
  };
}

/** AI Gateway's token limits (its examples/token_ratelimit/token_ratelimit.yaml: rules per `x-user-id`, each
 * `cost.request: {from: Number, number: 0}` and `cost.response` from `io.envoy.ai_gateway` metadata), two of
 * its rules (total tokens, 1,000 an hour; output tokens, 100,000 an hour), as Envoy Gateway translates a
 * Gateway-targeted BackendTrafficPolicy for one route: the route's descriptor, a rule's under it. */
export const AI_DOMAIN = 'default/envoy-ai-gateway-token-ratelimit/http';
export const AI_ROUTE = 'httproute/default/envoy-ai-gateway-token-ratelimit/rule/0/match/0/*';
export const aiGatewayConfig = (): EgConfig => ({
  name: AI_DOMAIN,
  domain: AI_DOMAIN,
  descriptors: [
    {
      key: AI_ROUTE,
      value: AI_ROUTE,
      rate_limit: null,
      descriptors: [1000, 100_000].map((requests_per_unit, i) => ({
        key: `rule-${i}-match-0`,
        value: '',
        rate_limit: { requests_per_unit, unit: 'HOUR', unlimited: false, name: '', replaces: [] },
        descriptors: [],
      })),
    },
  ],
});

/** Envoy's call for one turn of a user: at the request (each rule's `hits_addend` 0, a check), or when the
 * stream is done (each rule's own metadata: total, then output tokens). Both rules' descriptors are the same
 * entries (buildRouteRateLimits copies the rule with apply_on_stream_done). */
export function aiTurn(user: string, costs?: [total: number, output: number]): RlsRequest {
  const rule = (i: number) => ({
    entries: [
      { key: AI_ROUTE, value: AI_ROUTE },
      { key: `rule-${i}-match-0`, value: user },
    ],
    hits_addend: { value: costs ? costs[i]! : 0 },
  });
  return { domain: AI_DOMAIN, descriptors: [rule(0), rule(1)] };
}
