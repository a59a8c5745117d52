import { Ajv2020 } from 'ajv/dist/2020.js';

/** A JSON Schema of Envoy Gateway's own configuration (kind EnvoyGateway), written from its Go types
 * (api/v1alpha1/envoygateway_types.go and shared_types.go at commit d32f282): every field name of the parts a
 * Tollgate overlay writes, so a misspelt or misplaced key fails here, not silently in Envoy Gateway. Parts left
 * to Envoy Gateway (gateway, logging, admin, telemetry, …) are checked to exist by name only. No CRD exists for
 * this kind: Envoy Gateway reads it from a file. */

const anything = {};
const strict = (properties: Record<string, unknown>, required: string[] = []) => ({ type: 'object', additionalProperties: false, properties, required });

/** KubernetesContainerSpec. */
const container = strict({
  env: { type: 'array' },
  resources: { type: 'object' },
  securityContext: { type: 'object' },
  image: { type: 'string' },
  imageRepository: { type: 'string' },
  volumeMounts: { type: 'array' },
});

/** KubernetesPodSpec. */
const pod = strict({
  annotations: { type: 'object', additionalProperties: { type: 'string' } },
  labels: { type: 'object', additionalProperties: { type: 'string' } },
  securityContext: anything,
  affinity: anything,
  tolerations: { type: 'array' },
  volumes: { type: 'array' },
  imagePullSecrets: { type: 'array' },
  nodeSelector: { type: 'object' },
  topologySpreadConstraints: { type: 'array' },
});

/** KubernetesDeploymentSpec; KubernetesPatchSpec. */
const deployment = strict({
  patch: strict({ type: { enum: ['JSONMerge', 'StrategicMerge'] }, value: anything }, ['value']),
  replicas: { type: 'integer' },
  strategy: anything,
  pod,
  container,
  initContainers: { type: 'array' },
  name: { type: 'string' },
});

/** EnvoyGatewayKubernetesProvider: its two inline structs' fields. */
const kubernetes = strict({
  rateLimitDeployment: deployment,
  rateLimitHpa: anything,
  rateLimitPDB: anything,
  deploy: anything,
  shutdownManager: anything,
  proxyTopologyInjector: anything,
  watch: anything,
  leaderElection: anything,
  client: anything,
  cacheSyncPeriod: { type: 'string' },
});

/** RateLimit, RateLimitDatabaseBackend (type: Redis, the one kubebuilder enum value), RateLimitRedisSettings. */
const rateLimit = strict(
  {
    backend: strict(
      {
        type: { enum: ['Redis'] },
        redis: strict({ url: { type: 'string' }, urlRef: anything, tls: strict({ certificateRef: anything }) }),
      },
      ['type'],
    ),
    timeout: { type: 'string' },
    failClosed: { type: 'boolean' },
    telemetry: anything,
  },
  ['backend'],
);

const schema = strict(
  {
    apiVersion: { const: 'gateway.envoyproxy.io/v1alpha1' },
    kind: { const: 'EnvoyGateway' },
    gateway: anything,
    provider: strict({ type: { enum: ['Kubernetes', 'Custom'] }, kubernetes, custom: anything }, ['type']),
    logging: anything,
    admin: anything,
    telemetry: anything,
    xdsServer: anything,
    rateLimit,
    extensionManager: anything,
    extensionManagers: anything,
    extensionApis: anything,
    gatewayAPI: anything,
    runtimeFlags: anything,
    envoyProxy: anything,
  },
  ['apiVersion', 'kind'],
);

const validate = new Ajv2020({ allErrors: true, strict: false }).compile(schema);

/** What is wrong with an EnvoyGateway document, as messages (none: valid). */
export function envoyGatewayProblems(doc: unknown): string[] {
  if (validate(doc)) return [];
  return (validate.errors ?? []).map(
    (e) => `${e.instancePath || '/'} ${e.message}${e.params && 'additionalProperty' in e.params ? ` (${e.params.additionalProperty})` : ''}`,
  );
}
