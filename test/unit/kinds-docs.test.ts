import { existsSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ALGORITHMS, KIND_CODES } from '../../src/limits/kinds/index.js';

// What the config schema, docs/configuration.md and CONTRIBUTING.md say about the kinds of limit, held to the
// kinds registered in src/limits/kinds/index.ts: a kind added, renamed or removed there fails here until every
// one of them says so.

const registered = ALGORITHMS.map((a) => a.kind);
/** The kinds a config picks with `algorithm:`; in_flight is a descriptor key of its own (`in_flight: {…}`). */
const algorithms = registered.filter((k) => k !== 'in_flight');
const schema = JSON.parse(readFileSync('schema/descriptor-config.schema.json', 'utf8')) as { definitions?: Record<string, unknown> };

/** Every `algorithm` enum in the schema, wherever it is defined. */
function algorithmEnums(node: unknown, out: string[][] = []): string[][] {
  if (node === null || typeof node !== 'object') return out;
  for (const [key, value] of Object.entries(node)) {
    const e = (value as { enum?: unknown }).enum;
    if (key === 'algorithm' && Array.isArray(e)) out.push(e as string[]);
    algorithmEnums(value, out);
  }
  return out;
}

describe('the kinds of limit, wherever they are named', () => {
  it('are registered once each, in code order', () => {
    expect(registered).toEqual(Object.keys(KIND_CODES));
    expect(registered).toContain('in_flight');
  });

  it("are check-and-incr.lua's KINDS (lua/kinds.lua), in the same order: a shape's kind is its code there too", () => {
    const lua = readFileSync('src/store/lua/kinds.lua', 'utf8');
    const table = /^local KINDS = \{\n([\s\S]*?)\n\}$/m.exec(lua)?.[1];
    expect(table, 'lua/kinds.lua has the KINDS table').toBeDefined();
    expect(readFileSync('src/store/lua/check-and-incr.lua', 'utf8')).toContain('\n--#include kinds.lua\n');
    const entries = [...table!.matchAll(/^\s*\[(\d+)\] = \{ name = '([a-z_]+)'/gm)].map((m) => [Number(m[1]), m[2]]);
    expect(entries).toEqual(registered.map((k, i) => [i, k]));
    // What the script asks a kind is what TypeScript asks it: redis-batch.ts reads a reply's previous window by
    // readsPrevious where the script writes it by prev, and so on.
    const flags = [...table!.matchAll(/^\s*\[\d+\] = \{ name = '[a-z_]+'(.*)\}/gm)].map((m) => new Set([...m[1]!.matchAll(/(\w+) = true/g)].map((f) => f[1])));
    expect(flags.map((f) => [f.has('prev'), f.has('refills'), f.has('slots'), f.has('plain')])).toEqual(
      ALGORITHMS.map((a) => [a.readsPrevious, a.refills, a.slots, a.plainCount]),
    );
  });

  it("are the schema's algorithm enum (every copy of it) and its in_flight key", () => {
    const enums = algorithmEnums(schema);
    expect(enums.length).toBeGreaterThan(0);
    for (const e of enums) expect([...e].sort()).toEqual([...algorithms].sort());
    expect(JSON.stringify(schema)).toContain('"in_flight"');
  });

  it("are in docs/configuration.md's key table: the algorithm row names each, and in_flight has its row", () => {
    const doc = readFileSync('docs/configuration.md', 'utf8');
    const row = doc.split('\n').find((l) => l.startsWith('| `algorithm` |'));
    expect(row, 'docs/configuration.md has a row for `algorithm`').toBeDefined();
    const named = [...row!.matchAll(/`([a-z_]+)`/g)].map((m) => m[1]!).filter((n) => n !== 'algorithm');
    expect([...new Set(named)].sort()).toEqual([...algorithms].sort());
    expect(doc.split('\n').some((l) => l.startsWith('| `in_flight` |'))).toBe(true);
  });

  it("are in CONTRIBUTING.md's new-kind row, every file it names there existing", () => {
    const row = readFileSync('CONTRIBUTING.md', 'utf8')
      .split('\n')
      .find((l) => l.startsWith('| a new limit algorithm |'));
    expect(row, 'CONTRIBUTING.md has the new-kind row').toBeDefined();
    const paths = [...row!.matchAll(/`(src\/[^`]+|test\/[^`]+)`/g)].map((m) => m[1]!);
    expect(paths).toContain('src/limits/kinds/');
    expect(paths.filter((p) => !existsSync(p))).toEqual([]);
  });
});
