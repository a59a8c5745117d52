import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse, parseAllDocuments } from 'yaml';
// @ts-expect-error: a plain .mjs script without type declarations
import { kubectlPath } from '../../scripts/kubectl.mjs';
import { loadEnvoyConfig, PINNED_ENVOY_VERSION } from '../../src/envoy/routes.js';
import { parseServeArgs } from '../../src/settings/settings.js';
import { envoyGatewayProblems } from '../helpers/envoy-gateway-schema.js';
import { validateObject } from '../helpers/kubernetes.js';
import { makeCertificates } from '../helpers/tls.js';

// No cluster here: every overlay is rendered by kubectl's own Kustomize (v5), every object it renders is validated
// against the Kubernetes API schemas (and the Prometheus Operator's), and what the objects say is checked against
// Tollgate's settings, image and Envoy configs, so the files cannot drift from the code.

// biome-ignore lint/suspicious/noExplicitAny: manifests parsed from YAML, walked field by field; a wrong path fails the test
type Obj = Record<string, any>;
const DIR = 'deploy/kubernetes';
const KUBECTL: string = kubectlPath();

function render(dir: string): Obj[] {
  const text = execFileSync(KUBECTL, ['kustomize', dir], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  return parseAllDocuments(text).map((d) => d.toJS() as Obj);
}

/** An overlay with components added, as a user's own kustomization would: built in a directory of the checkout
 * (.cache/, ignored by git), since Kustomize takes only relative paths to other kustomizations. */
function renderWith(overlay: string, components: string[]): Obj[] {
  mkdirSync('.cache', { recursive: true });
  const dir = mkdtempSync(join('.cache', 'kustomize-'));
  const from = (p: string): string => relative(dir, join(DIR, p));
  try {
    writeFileSync(join(dir, 'kustomization.yaml'), JSON.stringify({ resources: [from(overlay)], components: components.map(from) }));
    return render(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const OVERLAYS = ['sidecar', 'central', 'demo', 'demo-central'] as const;
const rendered = Object.fromEntries(OVERLAYS.map((o) => [o, render(`${DIR}/${o}`)])) as Record<(typeof OVERLAYS)[number], Obj[]>;
const find = (objs: Obj[], kind: string, name: string): Obj => {
  const o = objs.find((x) => x.kind === kind && (x.metadata.name === name || x.metadata.name.startsWith(`${name}-`)));
  if (!o) throw new Error(`no ${kind} ${name} among ${objs.map((x) => `${x.kind}/${x.metadata.name}`).join(', ')}`);
  return o;
};
const containerOf = (deployment: Obj, name: string): Obj => deployment.spec.template.spec.containers.find((c: Obj) => c.name === name);
const podsOf = (objs: Obj[]): Obj[] => objs.filter((o) => o.kind === 'Deployment').map((d) => d.spec.template);
/** The tollgate-env ConfigMap's settings, read as the container reads them: envFrom, then env. */
const settingsOf = (objs: Obj[]): Record<string, string> => find(objs, 'ConfigMap', 'tollgate-env').data;
const dockerfileUser = (): number => Number(/^USER (\d+)(?::\d+)?\s*$/m.exec(readFileSync('Dockerfile', 'utf8'))?.[1]);
const version = (JSON.parse(readFileSync('package.json', 'utf8')) as { version: string }).version;

describe.each(OVERLAYS)('the %s overlay', (overlay) => {
  const objs = rendered[overlay];

  it('renders, and every object is valid against its API schema', () => {
    expect(objs.length).toBeGreaterThan(5);
    for (const o of objs) expect(validateObject(o), `${o.kind}/${o.metadata.name}`).toEqual([]);
  });

  it('runs every container non-root, read-only, without privileges, with requests and a memory limit', () => {
    for (const pod of podsOf(objs)) {
      const spec = pod.spec;
      expect(spec.securityContext.runAsNonRoot).toBe(true);
      expect(spec.securityContext.seccompProfile.type).toBe('RuntimeDefault');
      expect(spec.automountServiceAccountToken).toBe(false);
      for (const c of spec.containers) {
        expect(c.securityContext, c.name).toMatchObject({ allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ['ALL'] } });
        expect(c.resources.requests.cpu, c.name).toBeDefined();
        expect(c.resources.limits.memory, c.name).toBeDefined();
        expect(c.image, c.name).toMatch(/^[\w./-]+(:[\w.-]+|@sha256:[0-9a-f]{64})$/);
        expect(c.image, c.name).not.toMatch(/example\.com|:latest$/);
      }
    }
  });

  it("runs Tollgate as its image's user, at this version, with its config mounted whole where it reads it", () => {
    const pod = podsOf(objs).find((p) => p.spec.containers.some((c: Obj) => c.name === 'tollgate'))!;
    const tollgate = pod.spec.containers.find((c: Obj) => c.name === 'tollgate');
    expect(pod.spec.securityContext.runAsUser).toBe(dockerfileUser());
    expect(tollgate.image).toBe(`tollgate:${version}`);
    const mount = tollgate.volumeMounts.find((m: Obj) => m.name === 'tollgate-config');
    expect(mount.subPath).toBeUndefined();
    expect(settingsOf(objs).RUNTIME_CONFIG_DIR).toBe(mount.mountPath);
    const config = find(objs, 'ConfigMap', 'tollgate-config');
    expect(config.metadata.name).toBe('tollgate-config'); // stable: a live update reaches the running pods
    expect(config.data['property-api.yaml']).toBe(readFileSync('config/property-api.yaml', 'utf8'));
    expect(pod.spec.volumes.find((v: Obj) => v.name === 'tollgate-config').configMap.name).toBe('tollgate-config');
  });

  it('gives Tollgate settings it accepts, its Redis URL and admin token from Secrets, and no Secret value of its own', () => {
    const settings = settingsOf(objs);
    const parsed = parseServeArgs([], { ...settings, REDIS_URL: 'redis://redis:6379/0', TOLLGATE_ADMIN_TOKEN: 'x' });
    expect(parsed.store).toBe('redis');
    const tollgate = podsOf(objs)
      .flatMap((p) => p.spec.containers)
      .find((c: Obj) => c.name === 'tollgate');
    const env = (name: string): Obj => tollgate.env.find((e: Obj) => e.name === name).valueFrom.secretKeyRef;
    expect(env('TOLLGATE_ADMIN_TOKEN')).toEqual({ name: 'tollgate-admin', key: 'token', optional: true });
    expect(tollgate.envFrom).toEqual([{ configMapRef: { name: find(objs, 'ConfigMap', 'tollgate-env').metadata.name } }]);
    const secrets = objs.filter((o) => o.kind === 'Secret');
    if (overlay.startsWith('demo')) {
      // The demo's own Redis: an address, no credential, and the reference follows the generated name.
      expect(secrets.map((s) => s.metadata.name)).toEqual([env('REDIS_URL').name]);
      expect(Buffer.from(secrets[0]!.data.url, 'base64').toString()).toBe('redis://redis:6379/0');
      expect(find(objs, 'Service', 'redis').spec.ports[0].port).toBe(6379);
    } else {
      expect(secrets).toEqual([]);
      expect(env('REDIS_URL')).toEqual({ name: 'tollgate-redis', key: 'url' });
    }
  });

  it('answers readiness and liveness over HTTP on the metrics port, which the scraper alone may reach', () => {
    const tollgate = podsOf(objs)
      .flatMap((p) => p.spec.containers)
      .find((c: Obj) => c.name === 'tollgate');
    const metrics = tollgate.ports.find((p: Obj) => p.name === 'metrics').containerPort;
    expect(Number(settingsOf(objs).PORT)).toBe(metrics);
    expect(tollgate.readinessProbe.httpGet).toEqual({ path: '/readyz', port: 'metrics' });
    expect(tollgate.livenessProbe.httpGet).toEqual({ path: '/healthz', port: 'metrics' });
    const policies = objs.filter((o) => o.kind === 'NetworkPolicy');
    const scrapeRules = policies.flatMap((p) => p.spec.ingress).filter((r: Obj) => r.ports.some((p: Obj) => p.port === metrics));
    expect(scrapeRules.flatMap((r: Obj) => r.from)).toEqual([{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'monitoring' } } }]);
  });
});

describe('sidecar: Tollgate in every API pod, asked on loopback', () => {
  const objs = rendered.sidecar;
  const api = find(objs, 'Deployment', 'property-api');
  const envoy = loadEnvoyConfig(`${DIR}/sidecar/envoy.yaml`);

  it("ships the repository's envoy.yaml, which asks the pod's own Tollgate on its gRPC port", () => {
    expect(readFileSync(`${DIR}/sidecar/envoy.yaml`, 'utf8')).toBe(readFileSync('envoy/envoy.yaml', 'utf8'));
    expect(find(objs, 'ConfigMap', 'envoy-config').data['envoy.yaml']).toBe(readFileSync('envoy/envoy.yaml', 'utf8'));
    const settings = settingsOf(objs);
    expect(envoy.rls).toMatchObject({ address: settings.GRPC_HOST, port: Number(settings.GRPC_PORT), http2: true });
    expect(containerOf(api, 'tollgate').ports.map((p: Obj) => p.containerPort)).not.toContain(Number(settings.GRPC_PORT));
  });

  it('stays ready when Redis is lost, so the API pods stay in service (READY_REQUIRES_STORE=false, policy allow)', () => {
    expect(settingsOf(objs)).toMatchObject({ READY_REQUIRES_STORE: 'false', REDIS_FAILURE_POLICY: 'allow' });
    expect(envoy.failureModeDeny).toBe(false);
  });

  it('the API Service reaches Envoy, and only Envoy is open to every caller', () => {
    expect(find(objs, 'Service', 'property-api').spec.ports[0].targetPort).toBe('envoy-http');
    const policy = find(objs, 'NetworkPolicy', 'property-api');
    const open = policy.spec.ingress.filter((r: Obj) => r.from === undefined).flatMap((r: Obj) => r.ports.map((p: Obj) => p.port));
    expect(open).toEqual([containerOf(api, 'envoy').ports.find((p: Obj) => p.name === 'envoy-http').containerPort]);
    // Every other port the pod declares is for the scraper (and the kubelet, which comes from the node).
    const declared = api.spec.template.spec.containers.flatMap((c: Obj) => (c.ports ?? []).map((p: Obj) => p.containerPort));
    const scraped = policy.spec.ingress.filter((r: Obj) => r.from !== undefined).flatMap((r: Obj) => r.ports.map((p: Obj) => p.port));
    expect([...open, ...scraped].sort()).toEqual(declared.sort());
  });
});

describe('central: replicas behind a headless Service that every Envoy calls', () => {
  const objs = rendered.central;
  const tollgate = find(objs, 'Deployment', 'tollgate');
  const selector = tollgate.spec.selector.matchLabels;
  const service = find(objs, 'Service', 'tollgate');
  const envoy = loadEnvoyConfig(`${DIR}/central/envoy.yaml`);

  it("Envoy's tollgate cluster resolves the headless Service per replica, on the container's gRPC port", () => {
    expect(service.spec.clusterIP).toBe('None');
    expect(service.spec.selector).toEqual(selector);
    const grpc = service.spec.ports.find((p: Obj) => p.name === 'grpc');
    expect(containerOf(tollgate, 'tollgate').ports.find((p: Obj) => p.name === grpc.targetPort).containerPort).toBe(Number(settingsOf(objs).GRPC_PORT));
    expect(envoy.rls).toMatchObject({ address: service.metadata.name, port: grpc.port, http2: true });
    const cluster = (parse(readFileSync(`${DIR}/central/envoy.yaml`, 'utf8')) as Obj).static_resources.clusters.find((c: Obj) => c.name === 'tollgate');
    expect(cluster.type).toBe('STRICT_DNS');
    expect(settingsOf(objs).GRPC_HOST).toBe('0.0.0.0');
  });

  it("the central envoy.yaml is the sidecar's but for the tollgate cluster and its header comment", () => {
    const without = (path: string): Obj => {
      const doc = parse(readFileSync(path, 'utf8')) as Obj;
      doc.static_resources.clusters = doc.static_resources.clusters.filter((c: Obj) => c.name !== 'tollgate');
      return doc;
    };
    expect(without(`${DIR}/central/envoy.yaml`)).toEqual(without('envoy/envoy.yaml'));
  });

  it('survives a node: at least 2 replicas, spread by node, one disruption at a time, scaled on CPU', () => {
    expect(tollgate.spec.replicas).toBeGreaterThanOrEqual(2);
    const anti = tollgate.spec.template.spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm;
    expect(anti).toMatchObject({ topologyKey: 'kubernetes.io/hostname', labelSelector: { matchLabels: selector } });
    const pdb = find(objs, 'PodDisruptionBudget', 'tollgate');
    expect(pdb.spec).toEqual({ maxUnavailable: 1, selector: { matchLabels: selector } });
    const hpa = find(objs, 'HorizontalPodAutoscaler', 'tollgate');
    expect(hpa.spec.scaleTargetRef).toEqual({ apiVersion: 'apps/v1', kind: 'Deployment', name: 'tollgate' });
    expect(hpa.spec.minReplicas).toBeGreaterThanOrEqual(2);
    expect(hpa.spec.metrics[0].resource.name).toBe('cpu');
    expect(containerOf(tollgate, 'tollgate').resources.requests.cpu).toBeDefined(); // Utilization is a share of it
  });

  it('a replica that lost Redis leaves the Service (READY_REQUIRES_STORE=true); gRPC only from the API pods', () => {
    expect(settingsOf(objs).READY_REQUIRES_STORE).toBe('true');
    const policy = find(objs, 'NetworkPolicy', 'tollgate');
    const grpcRule = policy.spec.ingress.find((r: Obj) => r.ports.some((p: Obj) => p.port === 8081));
    const api = find(objs, 'Deployment', 'property-api');
    expect(grpcRule.from).toEqual([
      { podSelector: { matchLabels: { 'app.kubernetes.io/name': api.spec.template.metadata.labels['app.kubernetes.io/name'] } } },
    ]);
    expect(containerOf(api, 'tollgate')).toBeUndefined();
  });

  it("runs the sidecar's Tollgate container, but for the gRPC port it publishes", () => {
    const sidecar = containerOf(find(rendered.sidecar, 'Deployment', 'property-api'), 'tollgate');
    const central = containerOf(tollgate, 'tollgate');
    const strip = (c: Obj): Obj => ({ ...c, ports: c.ports.filter((p: Obj) => p.name !== 'grpc'), envFrom: undefined });
    expect(strip(central)).toEqual(strip(sidecar));
  });
});

describe('components/monitoring (Prometheus Operator)', () => {
  it.each(['sidecar', 'central'])('added to %s: a valid PodMonitor scraping every Tollgate and Envoy pod, and the rules', (overlay) => {
    const objs = renderWith(overlay, ['components/monitoring']);
    for (const o of objs) expect(validateObject(o), `${o.kind}/${o.metadata.name}`).toEqual([]);
    const monitor = find(objs, 'PodMonitor', 'tollgate');
    const [expr] = monitor.spec.selector.matchExpressions;
    const scraped = podsOf(objs).filter((p) => expr.values.includes(p.metadata.labels[expr.key]));
    const ports = scraped.flatMap((p) => p.spec.containers.flatMap((c: Obj) => (c.ports ?? []).map((x: Obj) => x.name)));
    for (const endpoint of monitor.spec.podMetricsEndpoints) expect(ports, endpoint.port).toContain(endpoint.port);
    expect(find(objs, 'PrometheusRule', 'tollgate').spec.groups.length).toBeGreaterThan(0);
  });
});

describe("envoy-gateway: Envoy Gateway's own configuration, with Tollgate's image for its rate-limit Deployment", () => {
  const objs = render(`${DIR}/envoy-gateway`);
  const config = find(objs, 'ConfigMap', 'envoy-gateway-config');
  const eg = parse(config.data['envoy-gateway.yaml']) as Obj;

  it('renders the ConfigMap Envoy Gateway reads, by its name, valid; the EnvoyGateway in it valid by its Go types', () => {
    expect(objs.map((o) => `${o.kind}/${o.metadata.namespace}/${o.metadata.name}`)).toEqual(['ConfigMap/envoy-gateway-system/envoy-gateway-config']);
    expect(validateObject(config)).toEqual([]);
    expect(envoyGatewayProblems(eg)).toEqual([]);
    expect(eg.provider.kubernetes.rateLimitDeployment.container.image).toBe(`tollgate:${version}`);
    expect(eg.rateLimit.backend).toMatchObject({ type: 'Redis', redis: { url: expect.stringMatching(/^[\w.-]+:\d+$/) } });
  });

  it('the schema check can fail: a misspelt field, a misplaced image, an unknown backend', () => {
    const broken = (f: (d: Obj) => void): string[] => {
      const d = structuredClone(eg);
      f(d);
      return envoyGatewayProblems(d);
    };
    expect(broken((d) => (d.rateLimit.backend.redis.URL = d.rateLimit.backend.redis.url)).join()).toMatch(/redis must NOT have additional properties \(URL\)/);
    expect(broken((d) => (d.provider.kubernetes.rateLimitDeployment.image = 'x')).join()).toMatch(/\(image\)/);
    expect(broken((d) => (d.rateLimit.backend.type = 'Memcache')).join()).toMatch(/type must be equal to one of the allowed values/);
  });

  it('the Deployment Envoy Gateway makes from it (its own, with the image and Redis) is valid and runs Tollgate as it is given', () => {
    const deployment = parseAllDocuments(readFileSync('test/fixtures/envoy-gateway/deployment-default.yaml', 'utf8'))[0]!.toJS() as Obj;
    const container = containerOf(deployment, 'envoy-ratelimit');
    container.image = eg.provider.kubernetes.rateLimitDeployment.container.image;
    container.env.find((e: Obj) => e.name === 'REDIS_URL').value = eg.rateLimit.backend.redis.url;
    expect(validateObject(deployment)).toEqual([]);
    expect(container.command).toEqual(['/bin/ratelimit']); // the image's shim (test/integration/image.test.ts)
    // Its environment as settings, its certificate files where the pod mounts them (here, made for the test).
    const certs = makeCertificates([{ name: 'tls', san: 'DNS:envoy-ratelimit' }]);
    const paths: Record<string, string> = {
      '/certs/tls.crt': certs.file('tls.pem'),
      '/certs/tls.key': certs.file('tls.key'),
      '/certs/ca.crt': certs.file('ca.pem'),
    };
    const env = Object.fromEntries(container.env.map((e: Obj) => [e.name, paths[e.value] ?? e.value]));
    const s = parseServeArgs([], env);
    expect(s.xdsServers).toMatchObject([{ target: 'envoy-gateway:18001', node: { id: 'envoy-ratelimit' } }]);
    expect(s.grpcTls).toMatchObject({ clientCa: certs.file('ca.pem'), clientCaFrom: 'GRPC_SERVER_TLS_CA_CERT' });
    expect(s.prometheus).toMatchObject({ host: '0.0.0.0', port: 19001, path: '/metrics' });
    expect(container.ports.find((p: Obj) => p.name === 'metrics').containerPort).toBe(19001);
    expect(deployment.spec.template.metadata.annotations['prometheus.io/port']).toBe('19001');
    expect([s.store, s.forceStart, s.responses.source]).toEqual(['redis', true, 'xds']);
  });
});

describe("ai-gateway-quota: AI Gateway's QuotaPolicy on the Tollgate Envoy Gateway runs", () => {
  const objs = render(`${DIR}/ai-gateway-quota`);
  const deployment = parseAllDocuments(readFileSync('test/fixtures/envoy-gateway/deployment-default.yaml', 'utf8'))[0]!.toJS() as Obj;
  const values = parse(readFileSync(`${DIR}/envoy-gateway/ai-gateway-values.yaml`, 'utf8')) as Obj;
  const patch = values.config.envoyGateway.provider.kubernetes.rateLimitDeployment.patch.value.spec.template.spec.containers[0];
  /** A strategic-merge patch merges a container's env by name: the patch's value replaces one of the same name. */
  const patchedEnv = (): Record<string, string> => {
    const env = Object.fromEntries(containerOf(deployment, 'envoy-ratelimit').env.map((e: Obj) => [e.name, e.value]));
    for (const e of patch.env) env[e.name] = e.value;
    return env;
  };

  it("the Service selects the pods of Envoy Gateway's rate-limit Deployment, on the plaintext port the patch opens", () => {
    const service = find(objs, 'Service', 'tollgate-ai-quota');
    expect(validateObject(service)).toEqual([]);
    expect(service.metadata.namespace).toBe(deployment.metadata.namespace);
    expect(service.spec.selector).toEqual(deployment.spec.template.metadata.labels);
    expect(String(service.spec.ports[0].targetPort)).toBe(patchedEnv().GRPC_PLAINTEXT_PORT);
    // AI Gateway's chart value names that Service, in that namespace, on its port.
    const ai = parse(readFileSync(`${DIR}/ai-gateway-quota/ai-gateway-values.yaml`, 'utf8')) as Obj;
    expect(ai.controller.quotaRateLimitServiceAddr).toBe(`${service.metadata.name}.${service.metadata.namespace}:${service.spec.ports[0].port}`);
  });

  it("the patched Deployment's environment: both xDS servers, each with its node ID and TLS, and the plaintext port", () => {
    const certs = makeCertificates([{ name: 'tls', san: 'DNS:envoy-ratelimit' }]);
    const paths: Record<string, string> = {
      '/certs/tls.crt': certs.file('tls.pem'),
      '/certs/tls.key': certs.file('tls.key'),
      '/certs/ca.crt': certs.file('ca.pem'),
    };
    const env = Object.fromEntries(Object.entries(patchedEnv()).map(([k, v]) => [k, paths[v] ?? v]));
    const s = parseServeArgs([], env);
    const secure = (x: { credentials: unknown }): boolean => (x.credentials as { _isSecure(): boolean })._isSecure();
    expect(s.xdsServers.map((x) => [x.target.split(':')[0], x.node.id, secure(x)])).toEqual([
      ['envoy-gateway', 'envoy-ratelimit', true],
      ['ai-gateway-controller.envoy-ai-gateway-system.svc.cluster.local', 'envoy-ai-gateway-ratelimit', false],
    ]);
    expect(s.xdsServers[1]!.target.endsWith(':18002')).toBe(true);
    expect([s.grpcPlaintextPort, s.grpcTls !== undefined]).toEqual([8082, true]);
    // Both places the token-limit add-on may write its patch carry the same container.
    expect(values.config.provider.kubernetes.rateLimitDeployment.patch.value.spec.template.spec.containers[0]).toEqual(patch);
  });
});

describe('what is pinned', () => {
  it(`Envoy ${PINNED_ENVOY_VERSION}, the release the route model follows, in every overlay and in docker-compose.yml`, () => {
    const compose = parse(readFileSync('docker-compose.yml', 'utf8')) as Obj;
    for (const overlay of OVERLAYS) {
      expect(containerOf(find(rendered[overlay], 'Deployment', 'property-api'), 'envoy').image).toBe(`envoyproxy/envoy:v${PINNED_ENVOY_VERSION}`);
    }
    expect(compose.services.envoy.image).toBe(`envoyproxy/envoy:v${PINNED_ENVOY_VERSION}`);
    expect(readFileSync('envoy/envoy.yaml', 'utf8')).toContain(`envoyproxy/envoy:v${PINNED_ENVOY_VERSION}`);
  });
});

describe('the schema check can fail', () => {
  it.each([
    ['a replica count as text', (d: Obj) => (d.spec.replicas = 'two'), /replicas must be integer/],
    ['a container without a name', (d: Obj) => delete d.spec.template.spec.containers[0].name, /containers\/0 must have required property name/],
    ['an unknown pull policy', (d: Obj) => (d.spec.template.spec.containers[0].imagePullPolicy = 'Sometimes'), /imagePullPolicy/],
  ])('%s is reported', (_what, breakIt, message) => {
    const deployment = structuredClone(find(rendered.central, 'Deployment', 'tollgate'));
    breakIt(deployment);
    expect(validateObject(deployment).join('\n')).toMatch(message);
  });

  it('an object of a kind the check does not know is reported, not passed', () => {
    expect(validateObject({ apiVersion: 'example.com/v1', kind: 'Gadget', metadata: { name: 'g' } })).toEqual(['no schema for example.com/v1 Gadget']);
  });
});
