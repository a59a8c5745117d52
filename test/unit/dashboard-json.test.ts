import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

// The dashboard as Grafana imports it: no fixed uid (the importer picks the datasource; Grafana assigns the
// dashboard's), variables for datasource, namespace, pod and domain, and every query filtered by them. No Grafana
// or renderer runs here (none comes from Debian's packages), so the panel list stands in for a screenshot.

// biome-ignore lint/suspicious/noExplicitAny: the dashboard's JSON, walked field by field
type Obj = Record<string, any>;
const dashboard = JSON.parse(readFileSync('deploy/grafana/dashboards/tollgate.json', 'utf8')) as Obj;
// biome-ignore lint/suspicious/noTemplateCurlyInString: Grafana's variable reference, not a JavaScript template
const DATASOURCE = '${datasource}';
const DOMAIN_LABELLED = [
  'tollgate_requests_total',
  'tollgate_decisions_total',
  'tollgate_hits_total',
  'tollgate_near_limit_total',
  'tollgate_over_limit_total',
  'tollgate_rlqs_assignments_total',
  'tollgate_rlqs_reported_requests_total',
  'tollgate_in_flight_slots_total',
  'tollgate_charged_hits_total',
  'tollgate_reserved_hits_total',
  'tollgate_reservations_total',
  'tollgate_budget_fullest_share',
  'tollgate_refunded_hits_total',
];

/** Every `uid` in the JSON, wherever it is. */
function uids(node: unknown, out: string[] = []): string[] {
  if (Array.isArray(node)) for (const n of node) uids(n, out);
  else if (node && typeof node === 'object') {
    for (const [k, v] of Object.entries(node)) {
      if (k === 'uid') out.push(String(v));
      else uids(v, out);
    }
  }
  return out;
}

/** Each metric selector of a query: the metric's name and the text between its braces. */
const selectors = (expr: string): { metric: string; labels: string }[] =>
  [...expr.matchAll(/\b((?:tollgate|envoy)_[a-z_]+)(?:\{([^}]*)\})?/g)].map((m) => ({ metric: m[1]!, labels: m[2] ?? '' }));

describe('deploy/grafana/dashboards/tollgate.json', () => {
  it('has no fixed uid: the datasource is a variable and the dashboard gets its uid on import', () => {
    expect(dashboard.uid).toBeUndefined();
    expect(dashboard.id).toBeNull();
    expect(new Set(uids(dashboard.panels))).toEqual(new Set([DATASOURCE]));
  });

  it('offers datasource, namespace, pod and domain variables, each narrowing the next', () => {
    const vars = Object.fromEntries((dashboard.templating.list as Obj[]).map((v) => [v.name, v]));
    expect(Object.keys(vars)).toEqual(['datasource', 'namespace', 'pod', 'domain', 'traces']);
    expect(vars.datasource).toMatchObject({ type: 'datasource', query: 'prometheus' });
    expect(vars.namespace.query.query).toBe('label_values(tollgate_build_info, namespace)');
    expect(vars.pod.query.query).toBe('label_values(tollgate_build_info{namespace=~"$namespace"}, pod)');
    expect(vars.domain.query.query).toBe('label_values(tollgate_requests_total{namespace=~"$namespace"}, domain)');
    for (const name of ['namespace', 'pod', 'domain']) {
      // All is ".*", which also matches a series without the label (a Prometheus that adds none, as docker-compose's).
      expect(vars[name], name).toMatchObject({ type: 'query', includeAll: true, multi: true, allValue: '.*', datasource: { uid: DATASOURCE } });
    }
  });

  it('filters every query by namespace and pod, and by domain where the metric has one', () => {
    const all = dashboard.panels.flatMap((p: Obj) => p.targets.flatMap((t: Obj) => selectors(t.expr)));
    expect(all.length).toBeGreaterThan(20);
    for (const { metric, labels } of all) {
      expect(labels, metric).toContain('namespace=~"$namespace"');
      expect(labels, metric).toContain('pod=~"$pod"');
      if (DOMAIN_LABELLED.includes(metric)) expect(labels, metric).toContain('domain=~"$domain"');
    }
  });

  it('holds these panels, in this order', () => {
    expect(dashboard.panels.map((p: Obj) => p.title)).toEqual([
      'Decisions/s by category and result',
      '429 ratio by domain',
      'Shadow rejections/s',
      'Near limit/s by window',
      'Decision latency',
      'Store latency',
      'Store errors/s',
      'Store degraded / local fallback',
      'Config reloads',
      'Over-limit answers from the local cache/s',
      'Requests admitted unchecked/s, by reason',
      'Redis memory (as Tollgate reads it)',
      'Redis evictions/s',
      'Envoy rate-limit calls/s (ok, over_limit, error)',
      'RLQS: requests Envoy decided locally/s',
      'RLQS: assignments/s by strategy',
      'RLQS: streams and buckets',
      'RLQS: refusals and stream errors/s',
      'In-flight slots/s, by event',
      'Refunded hits/s, by rule',
      'In-flight slots back by lease, share of taken, by rule',
      'In-flight takes refused/s, by rule',
      'In-flight slots held, by rule (census)',
      'In-flight: fullest counter, share of its limit, by rule',
      'In-flight renewals/s, by outcome (max_hold)',
      'Budget: tokens charged/s, by rule',
      'Budget: tokens reserved/s, by rule',
      'Budget: reservations/s, by event',
      'Budget: settlements waiting, and dropped in 15m',
      'Budget: fullest counter, share of its limit, by rule',
    ]);
    const ids = dashboard.panels.map((p: Obj) => p.id);
    expect(new Set(ids).size).toBe(ids.length);
  });
});
