import { PodMonitor, PrometheusRule } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1';
import { Deployment } from 'kubernetes-models/apps/v1';
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2';
import { NetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1';
import { ConfigMap, Secret, Service } from 'kubernetes-models/v1';

/** The models of the kinds Tollgate's manifests use, by apiVersion and kind. Each validates against the
 * Kubernetes OpenAPI schema of its type (the Prometheus Operator's CRD schemas for its kinds): types, enums,
 * required fields and formats. Unknown fields pass, as they do in those schemas; the API server's strict field
 * validation would refuse them. */
const MODELS: Record<string, new (data: never) => { validate(): void }> = {
  'apps/v1 Deployment': Deployment,
  'autoscaling/v2 HorizontalPodAutoscaler': HorizontalPodAutoscaler,
  'networking.k8s.io/v1 NetworkPolicy': NetworkPolicy,
  'policy/v1 PodDisruptionBudget': PodDisruptionBudget,
  'v1 ConfigMap': ConfigMap,
  'v1 Secret': Secret,
  'v1 Service': Service,
  'monitoring.coreos.com/v1 PodMonitor': PodMonitor,
  'monitoring.coreos.com/v1 PrometheusRule': PrometheusRule,
};

/** What is wrong with one manifest object, as messages (none: valid). A kind without a model is an error. */
export function validateObject(obj: { apiVersion?: unknown; kind?: unknown; [field: string]: unknown }): string[] {
  const Model = MODELS[`${obj.apiVersion} ${obj.kind}`];
  if (!Model) return [`no schema for ${obj.apiVersion} ${obj.kind}`];
  try {
    new Model(obj as never).validate();
    return [];
  } catch (err) {
    return [(err as Error).message];
  }
}
