import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

/** Folders depend one way: the serving side (server → rls → observe, http → rls) → limiter → store, with config
 * below them, limits (what a limit means: its kinds, checks, charge rules) below config, and counters (keys,
 * windows, the clock) at the bottom, xds feeding config from above, metrics beside, and rlqs/
 * (the whole Rate Limit Quota Service) beside the serving side, wired from the top. This reads the import
 * statements of src/ and checks the rules that keep it so. A "unit" is a folder of src/, or a file directly in
 * src/ (service, servers, …), named without .ts. */

const SRC = resolve('src');

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return sources(path);
    return e.name.endsWith('.ts') ? [path] : [];
  });
}

function unitOf(file: string): string {
  const [first, ...rest] = relative(SRC, file).split('/');
  return rest.length > 0 ? first! : first!.replace(/\.ts$/, '');
}

/** Every relative module a file names: import and export … from (multi-line too), and import(). */
function importsOf(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const specifiers = [
    ...text.matchAll(/^\s*(?:import|export)\b[^;]*?\bfrom\s*['"]([^'"]+)['"]/gms),
    ...text.matchAll(/^\s*import\s*['"]([^'"]+)['"]/gm),
    ...text.matchAll(/\bimport\(\s*['"]([^'"]+)['"]\s*\)/g),
  ].map((m) => m[1]!);
  return specifiers.filter((s) => s.startsWith('.')).map((s) => resolve(dirname(file), s).replace(/\.js$/, '.ts'));
}

/** unit → units it imports, and the file that does it (for the failure message). */
function graph(): Map<string, Map<string, string>> {
  const edges = new Map<string, Map<string, string>>();
  for (const file of sources(SRC)) {
    const from = unitOf(file);
    for (const target of importsOf(file)) {
      const to = unitOf(target);
      if (to === from) continue;
      if (!edges.has(from)) edges.set(from, new Map());
      edges.get(from)!.set(to, relative(SRC, file));
    }
  }
  return edges;
}

/** The edges that break a rule: `from` importing any of `forbidden`. */
function violations(edges: Map<string, Map<string, string>>, from: string, forbidden: string[]): string[] {
  return [...(edges.get(from) ?? [])].filter(([to]) => forbidden.includes(to)).map(([to, file]) => `${from} → ${to} (${file})`);
}

describe('the import graph of src/', () => {
  const edges = graph();

  it('is read from the sources (the parser sees multi-line and type-only imports)', () => {
    expect(edges.get('limiter')?.has('store')).toBe(true);
    expect(edges.get('service')?.has('limiter')).toBe(true);
    expect(edges.size).toBeGreaterThan(10);
  });

  it('store/ imports neither the limiter, the metrics nor the settings', () => {
    expect(violations(edges, 'store', ['limiter', 'metrics', 'settings'])).toEqual([]);
  });

  it('limits/ (what a limit means: checks, results, charge rules, kinds) stands below the limiter, the store and config', () => {
    expect(edges.get('store')?.has('limits')).toBe(true);
    expect(edges.get('limiter')?.has('limits')).toBe(true);
    // A config is read into limits of the registered kinds, which say what keys and shapes they take.
    expect(edges.get('config')?.has('limits')).toBe(true);
    const above = [
      'config',
      'store',
      'limiter',
      'rlqs',
      'server',
      'rls',
      'http',
      'observe',
      'control',
      'metrics',
      'tracing',
      'tuning',
      'response',
      'service',
      'settings',
      'xds',
    ];
    expect(violations(edges, 'limits', above)).toEqual([]);
  });

  it('limiter/ imports neither control/ nor the serving side', () => {
    expect(violations(edges, 'limiter', ['control', 'server', 'rls', 'http', 'observe', 'xds', 'metrics', 'tuning'])).toEqual([]);
  });

  it('the serving side points down: server (gRPC) → rls (the RLS wire and handler) → observe, http → rls', () => {
    expect(edges.get('server')?.has('rls')).toBe(true);
    expect(edges.get('http')?.has('rls')).toBe(true);
    expect(edges.get('rls')?.has('observe')).toBe(true);
    const wiring = ['service', 'settings', 'config-source', 'rlqs', 'control', 'tuning'];
    expect([
      ...violations(edges, 'server', ['http', 'observe', ...wiring]),
      ...violations(edges, 'http', ['server', 'observe', ...wiring]),
      ...violations(edges, 'rls', ['server', 'http', ...wiring]),
      ...violations(edges, 'observe', ['server', 'rls', 'http', ...wiring]),
    ]).toEqual([]);
  });

  it('response/ (answers, and errors → status) sits below everything that answers', () => {
    expect(violations(edges, 'response', ['server', 'rls', 'http', 'observe', 'control', 'rlqs', 'service', 'settings'])).toEqual([]);
  });

  it('rlqs/ (RLQS: its stream, assignments and share table) stands on the limiter and the store, beside the serving side', () => {
    expect(edges.get('rlqs')?.has('limiter')).toBe(true);
    expect(edges.get('rlqs')?.has('store')).toBe(true);
    const serving = ['server', 'http', 'observe', 'control', 'xds', 'config-source', 'tuning', 'tracing', 'workers'];
    expect(violations(edges, 'rlqs', [...serving, 'service', 'servers', 'commands', 'cli'])).toEqual([]);
  });

  it('nothing below the wiring imports rlqs/: only service, servers and the commands at the top may', () => {
    const below = [
      'limiter',
      'limits',
      'store',
      'config',
      'counters',
      'response',
      'metrics',
      'rls',
      'server',
      'http',
      'observe',
      'settings',
      'xds',
      'tracing',
      'control',
    ];
    expect(below.flatMap((u) => violations(edges, u, ['rlqs']))).toEqual([]);
  });

  it('the files outside rlqs/ that import it are exactly these (CONTRIBUTING.md and docs/architecture.md name them)', () => {
    const importers = sources(SRC)
      .filter((f) => unitOf(f) !== 'rlqs' && importsOf(f).some((t) => unitOf(t) === 'rlqs'))
      .map((f) => relative(SRC, f))
      .sort();
    expect(importers).toEqual(['commands/simulate-explain.ts', 'service.ts', 'tuning/bucket-report.ts']);
    for (const doc of ['CONTRIBUTING.md', 'docs/architecture.md']) {
      const text = readFileSync(doc, 'utf8').replace(/\s+/g, ' ');
      for (const f of importers) expect(text, `${doc} names ${f} as an importer of rlqs/`).toContain(`\`${f.replace(/^/, 'src/')}\``);
    }
  });

  it('config/ and counters/ sit below the limiter and the stores; counters/ below limits/ too', () => {
    const above = ['limiter', 'store', 'server', 'rls', 'http', 'observe', 'rlqs', 'control', 'metrics', 'tuning', 'response', 'service', 'settings', 'xds'];
    expect([...violations(edges, 'config', above), ...violations(edges, 'counters', [...above, 'config', 'limits'])]).toEqual([]);
  });

  it('xds/ (the xDS protocol client) feeds config/ from above: it imports config/, never the reverse', () => {
    expect(edges.get('xds')?.has('config')).toBe(true);
    const others = ['limiter', 'store', 'server', 'rls', 'http', 'observe', 'rlqs', 'control', 'metrics', 'tuning', 'response', 'service', 'settings'];
    expect(violations(edges, 'xds', others)).toEqual([]);
  });

  it('tracing/ sits beside, as metrics/ does: the decision path below the server never imports it', () => {
    const below = ['limiter', 'store', 'config', 'counters', 'response', 'metrics'].flatMap((u) => violations(edges, u, ['tracing']));
    const above = ['server', 'rls', 'http', 'observe', 'service', 'settings', 'control', 'limiter', 'tuning'];
    expect([...below, ...violations(edges, 'tracing', above)]).toEqual([]);
  });

  it('the running service does not load the tuning tools', () => {
    expect(violations(edges, 'service', ['tuning'])).toEqual([]);
  });

  it('has no cycle between folders', () => {
    const cycles: string[] = [];
    const done = new Set<string>();
    const visit = (unit: string, path: string[]): void => {
      if (path.includes(unit)) cycles.push([...path.slice(path.indexOf(unit)), unit].join(' → '));
      if (path.includes(unit) || done.has(unit)) return;
      for (const next of edges.get(unit)?.keys() ?? []) visit(next, [...path, unit]);
      done.add(unit);
    };
    for (const unit of edges.keys()) visit(unit, []);
    expect(cycles).toEqual([]);
  });
});
