import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { loadConfigDir } from '../../src/config/load.js';
import { matchRule } from '../../src/config/match.js';
import { DEFAULT_PEER, descriptorsFor, loadEnvoyConfig, possibleDescriptors } from '../../src/envoy/routes.js';
import { SERVE_OPTIONS } from '../../src/settings/settings.js';

// No Envoy, Docker or Kubernetes here: the files are parsed and cross-checked against Tollgate's own config,
// defaults and code, so they cannot drift apart unnoticed.

// biome-ignore lint/suspicious/noExplicitAny: manifests parsed from YAML, walked field by field; a wrong path fails the test
type Obj = Record<string, any>;
const envoy = loadEnvoyConfig('envoy/envoy.yaml');
const config = loadConfigDir('config');

describe('envoy/envoy.yaml', () => {
  it('asks Tollgate for domain property-api over HTTP/2 on its default gRPC port', () => {
    expect(envoy.domain).toBe('property-api');
    expect(config.domains.has(envoy.domain)).toBe(true);
    expect(envoy.rls).toEqual({ cluster: 'tollgate', address: '127.0.0.1', port: Number(SERVE_OPTIONS['grpc-port'].default), http2: true });
    expect(envoy.transportApiVersion).toBe('V3');
  });

  it('limits internal and external requests alike, and lets no header decide which a request is', () => {
    expect(envoy.requestType).toBe('both');
    expect(envoy.connectionManager).toMatchObject({ useRemoteAddress: true, xffNumTrustedHops: 0, internalAddresses: ['127.0.0.1/32', '::1/128'] });
    expect(envoy.connectionManager).toMatchObject({ normalizePath: true, mergeSlashes: true, escapedSlashes: 'UNESCAPE_AND_REDIRECT' });
  });

  it('fails open, leaves the X-RateLimit headers to Tollgate, and waits longer than Tollgate waits for Redis', () => {
    expect(envoy.failureModeDeny).toBe(false);
    expect(envoy.xRateLimitHeaders).toBe('OFF');
    expect(envoy.timeoutMs).toBeGreaterThan(Number(SERVE_OPTIONS['redis-timeout-ms'].default));
    expect(envoy.timeoutMs).toBeLessThanOrEqual(100);
  });

  it('forwards no header value Tollgate would refuse for its length (a refusal passes the request)', () => {
    const doc = parse(readFileSync('envoy/envoy.yaml', 'utf8')) as Obj;
    const hcm = doc.static_resources.listeners[0].filter_chains[0].filters[0].typed_config;
    expect(hcm.max_request_headers_kb * 1024).toBeLessThanOrEqual(Number(SERVE_OPTIONS['max-value-bytes'].default));
  });

  it('every descriptor its routes can produce matches a limiting rule of the bundled config', () => {
    const domain = config.domains.get('property-api')!;
    const shapes = possibleDescriptors(envoy);
    expect(shapes.length).toBe(12); // 4 routes × (with and without a token, and the backstop per address)
    for (const entries of shapes) {
      const rule = matchRule(domain, entries);
      expect(rule, JSON.stringify(entries)).toBeDefined();
      expect(rule!.unlimited).toBe(false);
      expect(rule!.limits.length).toBeGreaterThan(0);
    }
  });

  // The full table, every spelling and forged header, is test/envoy/route-model.test.ts; these are the shapes.
  it.each([
    ['GET', '/modules', 'read'],
    ['GET', '/invoices/INV-1?expand=lines', 'read'],
    ['HEAD', '/invoices', 'read'],
    ['GET', '/INVOICES', 'read'],
    ['GET', '/reports/monthly', 'reports'],
    ['GET', '/reports', 'reports'],
    ['POST', '/invoices', 'write'],
    ['PUT', '/modules/3', 'write'],
    ['PATCH', '/invoices/1', 'write'],
    ['DELETE', '/anything', 'write'],
    ['TRACE', '/healthz', 'write'],
    ['GET', '/healthz', undefined],
    ['OPTIONS', '/invoices', undefined],
  ])('%s %s → %s', (method, path, category) => {
    const ds = descriptorsFor(envoy, { method, path, headers: { authorization: 'Bearer abc' } });
    if (!category) {
      expect(ds).toEqual([]);
      return;
    }
    const backstop = [
      { key: 'category', value: category },
      { key: 'remote_address', value: DEFAULT_PEER },
    ];
    expect(ds).toEqual([
      [
        { key: 'category', value: category },
        { key: 'token', value: 'Bearer abc' },
      ],
      backstop,
    ]);
    // Without credentials the token entry is skipped, not the call.
    expect(descriptorsFor(envoy, { method, path, headers: {} })).toEqual([[{ key: 'category', value: category }], backstop]);
  });

  it("keeps Envoy's admin on loopback and exposes only its stats and readiness", () => {
    const doc = parse(readFileSync('envoy/envoy.yaml', 'utf8')) as Obj;
    expect(doc.admin.address.socket_address.address).toBe('127.0.0.1');
    const stats = doc.static_resources.listeners.find((l: Obj) => l.name === 'stats');
    const routes = stats.filter_chains[0].filters[0].typed_config.route_config.virtual_hosts[0].routes;
    expect(routes.map((r: Obj) => r.match.path)).toEqual(['/stats/prometheus', '/ready']);
    const admin = doc.static_resources.clusters.find((c: Obj) => c.name === 'envoy_admin');
    expect(admin.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.port_value).toBe(doc.admin.address.socket_address.port_value);
  });
});

// deploy/kubernetes: test/integration/kubernetes.test.ts renders every overlay and checks what it holds.

// The Dockerfile: test/integration/image.test.ts.
describe('docker-compose.yml', () => {
  it('compose runs the pod, Envoy and Tollgate on one loopback, with Redis, Prometheus and Grafana', () => {
    const compose = parse(readFileSync('docker-compose.yml', 'utf8')) as Obj;
    expect(Object.keys(compose.services).sort()).toEqual(['envoy', 'grafana', 'pod', 'prometheus', 'redis', 'tollgate']);
    expect(compose.services.envoy.network_mode).toBe('service:pod');
    expect(compose.services.tollgate.network_mode).toBe('service:pod');
    for (const service of Object.values(compose.services) as Obj[]) {
      for (const volume of (service.volumes ?? []) as string[]) expect(existsSync(volume.split(':')[0]!), volume).toBe(true);
    }
    expect(compose.services.pod.ports).toEqual(['127.0.0.1:10000:10000']);
    // Nothing is published beyond this machine, and Tollgate's gRPC stays inside the pod's namespace.
    for (const service of Object.values(compose.services) as Obj[]) {
      for (const port of (service.ports ?? []) as string[]) expect(port).toMatch(/^127\.0\.0\.1:\d+:\d+$/);
    }
    expect(compose.services.tollgate.environment.GRPC_HOST).toBe('127.0.0.1');
  });

  it('the Prometheus config passes promtool, and Grafana provisions a default Prometheus the datasource variable picks', () => {
    expect(execFileSync('promtool', ['check', 'config', 'deploy/prometheus/prometheus.yml']).toString()).toMatch(/SUCCESS/);
    const ds = parse(readFileSync('deploy/grafana/provisioning/datasources/prometheus.yml', 'utf8')) as Obj;
    const dashboard = JSON.parse(readFileSync('deploy/grafana/dashboards/tollgate.json', 'utf8')) as Obj;
    const variable = dashboard.templating.list.find((v: Obj) => v.name === 'datasource');
    expect(ds.datasources[0]).toMatchObject({ type: variable.query, isDefault: true });
  });
});
