import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Metrics } from '../../src/metrics/metrics.js';
import { RlqsMetrics } from '../../src/metrics/rlqs-metrics.js';
import { codeSpans, tablesOf } from '../helpers/markdown.js';

/** docs/operations.md's table of metrics is the code's: a row for every metric Tollgate defines (each
 * `tollgate_…` name written in src/, wherever it is registered), none for a metric that is gone, and for the
 * metrics a registry can be built with here, the type, the labels and every label value the code sets up front
 * (reasons, results, kinds). A metric added without its row fails here. */

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    return e.isDirectory() ? sources(path) : e.name.endsWith('.ts') ? [path] : [];
  });
}

/** Every metric name src/ writes as a string: metrics are registered in several files, some only when a
 * feature is on (xDS, tracing, Redis), so no one registry holds them all. */
const namedInCode = new Set(sources('src').flatMap((f) => [...readFileSync(f, 'utf8').matchAll(/['"`](tollgate_[a-z0-9_]+)['"`]/g)].map((m) => m[1]!)));

/** A registry with every metric that needs no running service. */
async function builtHere(): Promise<{ name: string; type: string; labelNames: string[]; values: { labels: Record<string, unknown> }[] }[]> {
  const m = new Metrics({ nearLimitRatio: 0.8 });
  m.xds();
  m.observability();
  m.initStore('redis');
  m.redisMemory(async () => ({ usedBytes: 1, maxBytes: 2, evictedKeys: 3 }));
  new RlqsMetrics(m.registry);
  const json = await m.registry.getMetricsAsJSON();
  return json
    .filter((j) => j.name.startsWith('tollgate_'))
    .map((j) => {
      const metric = m.registry.getSingleMetric(j.name) as { labelNames?: string[] } | undefined;
      return { name: j.name, type: String(j.type), labelNames: metric?.labelNames ?? [], values: j.values };
    });
}

const table = tablesOf('docs/operations.md').find((t) => t.header[0] === 'metric' && t.header.includes('labels'));
/** Each documented metric with its row (a row may name several). */
const rows = new Map(
  (table?.rows ?? []).flatMap((row) =>
    codeSpans(row[0] ?? '')
      .filter((n) => n.startsWith('tollgate_'))
      .map((name) => [name, { type: row[1] ?? '', labels: row[2] ?? '', what: row[3] ?? '' }] as const),
  ),
);

/** Labels whose values are configured things or the store's kind, not a fixed list the row names. */
const OPEN_LABELS = new Set(['domain', 'store', 'hash', 'version', 'node', 'code', 'endpoint']);

describe("docs/operations.md's table of metrics", () => {
  it('is there, and the scan of src/ finds every metric a registry holds', async () => {
    expect(rows.size).toBeGreaterThan(30);
    const built = await builtHere();
    expect(built.length).toBeGreaterThan(20);
    expect(built.map((b) => b.name).filter((n) => !namedInCode.has(n))).toEqual([]);
  });

  it('has a row for every metric in src/', () => {
    expect([...namedInCode].filter((n) => !rows.has(n))).toEqual([]);
  });

  it('names no metric the code does not define', () => {
    expect([...rows.keys()].filter((n) => !namedInCode.has(n))).toEqual([]);
  });

  it("gives each metric's type and labels as the code registers them", async () => {
    const problems = (await builtHere()).flatMap((b) => {
      const row = rows.get(b.name);
      if (!row) return [];
      const labels = row.labels
        .split(',')
        .map((l) => l.trim())
        .filter(Boolean);
      const out: string[] = [];
      if (row.type !== b.type) out.push(`${b.name}: type ${row.type}, registered as ${b.type}`);
      if (b.labelNames.length && labels.join() !== b.labelNames.join()) out.push(`${b.name}: labels ${labels.join()}, registered ${b.labelNames.join()}`);
      return out;
    });
    expect(problems).toEqual([]);
  });

  it('names every label value the code sets up front (reasons, results, kinds)', async () => {
    const problems = (await builtHere()).flatMap((b) => {
      const row = rows.get(b.name);
      if (!row) return [];
      const named = new Set(codeSpans(row.what));
      const values = b.values.flatMap((v) =>
        Object.entries(v.labels)
          .filter(([k]) => !OPEN_LABELS.has(k) && k !== 'le')
          .map(([, value]) => String(value)),
      );
      return [...new Set(values)].filter((v) => !named.has(v)).map((v) => `${b.name}: \`${v}\` not in its row`);
    });
    expect(problems).toEqual([]);
  });
});
