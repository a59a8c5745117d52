import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
// @ts-expect-error: a plain .mjs script of scripts/, without types
import { integrityOf, PINS, satisfies, verify } from '../../scripts/node-lines.mjs';

/** The Node.js releases .ci/run tests on (scripts/node-lines.json) are one per line engines allows, README names
 * them, and a tarball that is not the pinned one is refused. */

const pins = PINS as { version: string; integrity: string }[];
const engines = JSON.parse(readFileSync('package.json', 'utf8')).engines.node as string;
const major = (v: string): string => v.replace(/^v/, '').split('.')[0]!;

describe('the pinned Node.js lines', () => {
  it('are one release of each line engines allows, newest line first, each allowed', () => {
    const lines = engines.split('||').map((r) => major(r.trim().slice(1)));
    expect(pins.map((p) => major(p.version)).sort()).toEqual([...lines].sort());
    expect(Number(major(pins[0]!.version))).toBe(Math.max(...lines.map(Number)));
    for (const p of pins) expect(satisfies(p.version, engines)).toBe(true);
    for (const p of pins) expect(p.integrity).toMatch(/^sha512-[A-Za-z0-9+/]{86}==$/);
  });

  it('reads engines as npm does for caret ranges', () => {
    expect(satisfies('22.12.0', '^22.12.0 || ^24.0.0')).toBe(true);
    expect(satisfies('v24.21.0', '^22.12.0 || ^24.0.0')).toBe(true);
    expect(satisfies('22.11.9', '^22.12.0 || ^24.0.0')).toBe(false);
    expect(satisfies('20.20.2', '^22.12.0 || ^24.0.0')).toBe(false);
    expect(satisfies('26.0.0', '^22.12.0 || ^24.0.0')).toBe(false);
  });

  it('are the lines README says the suite runs on', () => {
    const readme = readFileSync('README.md', 'utf8');
    for (const p of pins) expect(readme).toContain(`Node.js ${major(p.version)}`);
  });

  it('refuse a tarball that is not the pinned one', () => {
    const file = join(mkdtempSync(join(tmpdir(), 'tollgate-pin-')), 'node.tgz');
    writeFileSync(file, 'not node');
    expect(() => verify(file, integrityOf(file))).not.toThrow();
    expect(() => verify(file, pins[0]!.integrity)).toThrow(/refused/);
  });
});
