import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../src/config/errors.js';
import { applyOverlay, type ConfigDoc, MAX_OVERLAY_ENTRIES, parseOverlay } from '../../src/config/overlay.js';
import { OverlayFile } from '../../src/config/overlay-file.js';

// XDS_OVERLAY_FILE's format and how it is written into a generated config (src/config/overlay.ts).

const generated = (): ConfigDoc => ({
  domain: 'd',
  descriptors: [{ key: 'route', value: 'r', descriptors: [{ key: 'user', rate_limit: { unit: 'HOUR', requests_per_unit: 1000 } }] }],
});
const problems = (text: string): string => {
  try {
    parseOverlay('o.yaml', text);
    return 'accepted';
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as ConfigError).message;
  }
};
const entry = (set: string, path = '[{key: route, value: r}, {key: user}]') => `overlays:\n  - domain: d\n    descriptors: ${path}\n    set: ${set}\n`;

describe('overlay entries', () => {
  it('merge rate_limit key by key; rate_limits replace the generated rate_limit; other keys are set', () => {
    const doc = generated();
    expect(applyOverlay(doc, parseOverlay('o.yaml', entry('{rate_limit: {calendar: true, unit: month}, charge_mode: true}')))).toEqual([]);
    expect(doc.descriptors[0]!.descriptors).toEqual([
      { key: 'user', rate_limit: { unit: 'month', requests_per_unit: 1000, calendar: true }, charge_mode: true },
    ]);
    const several = generated();
    applyOverlay(several, parseOverlay('o.yaml', entry('{rate_limits: [{unit: minute, requests_per_unit: 5}]}')));
    expect(several.descriptors[0]!.descriptors).toEqual([{ key: 'user', rate_limits: [{ unit: 'minute', requests_per_unit: 5 }] }]);
  });

  it('a path matches values exactly (a key-only level has none); a miss is returned, nothing written', () => {
    const doc = generated();
    const overlay = parseOverlay('o.yaml', entry('{charge_mode: true}', '[{key: route, value: other}, {key: user}]'));
    expect(applyOverlay(doc, overlay).map((e) => e.at)).toEqual(['o.yaml:2']);
    expect(doc).toEqual(generated());
    // Another domain's entry is not this document's miss.
    expect(applyOverlay({ ...generated(), domain: 'e' }, overlay)).toEqual([]);
  });

  it('one overlay written into two documents shares nothing between them', () => {
    const overlay = parseOverlay('o.yaml', entry('{tier_limits: {gold: [{unit: hour, requests_per_unit: 5}]}}'));
    const [a, b] = [generated(), generated()];
    applyOverlay(a, overlay);
    applyOverlay(b, overlay);
    (a.descriptors[0]!.descriptors as Record<string, { gold: unknown[] }>[])[0]!.tier_limits!.gold.push('x');
    expect((b.descriptors[0]!.descriptors as Record<string, { gold: unknown[] }>[])[0]!.tier_limits!.gold).toHaveLength(1);
  });

  it('refuses, by line: keys that name or nest a descriptor, a domain key on a descriptor, no set, no domain', () => {
    const naming = problems(entry('{descriptors: [], key: x}'));
    expect(naming).toMatch(/o\.yaml:4:\d+: overlays\[0\]\.set\.descriptors: unknown key/);
    expect(naming).toMatch(/overlays\[0\]\.set\.key: unknown key/);
    expect(problems(entry('{tiers: {gold: {}}}'))).toMatch(/overlays\[0\]\.set\.tiers: unknown key/);
    expect(problems('overlays:\n  - domain: d\n')).toMatch(/overlays\[0\]\.set: is required/);
    expect(problems('overlays:\n  - set: {tiers: {g: {}}}\n')).toMatch(/overlays\[0\]\.domain: is required/);
    expect(problems('overlay: []\n')).toMatch(/overlay: unknown key \(allowed: overlays\)/);
  });

  it('bounds: entries, path depth and aliases', () => {
    const many = `overlays:\n${'  - {domain: d, set: {algorithm: token_bucket}}\n'.repeat(MAX_OVERLAY_ENTRIES + 1)}`;
    expect(problems(many)).toMatch(/10001 entries, more than 10000/);
    const deep = `[${Array.from({ length: 65 }, (_, i) => `{key: k${i}}`).join(', ')}]`;
    expect(problems(entry('{charge_mode: true}', deep))).toMatch(/more than 64 levels/);
    // Each level ten of the one before, nine levels deep, inside an allowed key: a billion strings unless bounded.
    const levels = Array.from(
      { length: 9 },
      (_, i) =>
        `l${i}: &l${i} [${
          i === 0
            ? `${'x, '.repeat(9)}x`
            : Array(10)
                .fill(`*l${i - 1}`)
                .join(', ')
        }]`,
    );
    const bomb = `overlays:\n  - domain: d\n    descriptors: [{key: k}]\n    set:\n      metadata:\n${levels.map((l) => `        ${l}`).join('\n')}\n`;
    expect(problems(bomb)).toMatch(/alias/i);
  });
});

describe('the overlay file', () => {
  it('a FIFO is refused at once, at start and when it replaces the file, instead of holding the event loop', () => {
    const dir = mkdtempSync(join(tmpdir(), 'tollgate-overlay-fifo-'));
    try {
      const fifo = join(dir, 'fifo.yaml');
      execFileSync('mkfifo', [fifo]);
      expect(() => new OverlayFile(fifo, 1 << 20, () => {})).toThrow(/not a regular file/);
      const file = join(dir, 'o.yaml');
      writeFileSync(file, 'overlays: []\n');
      const reports: (string | undefined)[] = [];
      const watched = new OverlayFile(file, 1 << 20, (p) => reports.push(p));
      rmSync(file);
      execFileSync('mkfifo', [file]);
      watched.check();
      expect(reports).toEqual(['not a regular file']);
      expect(watched.current.text).toBe('overlays: []\n'); // the last text read stays
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
