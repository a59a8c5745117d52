import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';

// A kind of limit should own all about itself (issue 60): nothing outside its own files should branch on its
// code, its name or `burst > 0` (meaning "a bucket"). This scans the code of src/ (comments left out) for
//   - an import of a kind's code (FIXED, SLIDING, BUCKET, SLOTS from config/kinds.ts),
//   - a kind's name as a string ('fixed_window', 'sliding_window', 'token_bucket', 'in_flight'),
//   - `burst > 0`,
// outside the kinds themselves (src/limits/kinds/), their registry (src/config/kinds.ts) and the config types
// that name them (src/config/spec.ts). The files that still do are listed below: a new one fails this test,
// and one that stops must leave the list, so the list only shrinks as kinds take over what is theirs.

const STILL_BRANCHING = [
  'commands/check-config.ts',
  'config/compile.ts',
  'config/rule-diff.ts',
  'config/validate-limits.ts',
  'config/validate.ts',
  'control/inspect.ts',
  'limiter/explain.ts',
  'limiter/limiter.ts',
  'limiter/plan.ts',
  'limits/charge-rules.ts',
  'response/assignment-summary.ts',
  'response/headers.ts',
  'response/response.ts',
  'rlqs/quota/bucket-plan.ts',
  'rlqs/quota/fleet-capacity.ts',
  'rlqs/summary.ts',
  'store/across-parts.ts',
  'store/batch-queues.ts',
  'store/memory-store.ts',
  'store/over-limit-cache.ts',
  'store/redis-batch.ts',
  'tuning/generate.ts',
  'tuning/report.ts',
];
const OWNERS = [/^limits\/kinds\//, /^config\/kinds\.ts$/, /^config\/spec\.ts$/];

const CODE_IMPORT = /import\s*(?:type\s*)?\{[^}]*\b(FIXED|SLIDING|BUCKET|SLOTS)\b[^}]*\}\s*from\s*'[^']*config\/kinds\.js'/s;
const NAME = /['"`](fixed_window|sliding_window|token_bucket|in_flight)['"`]/;
const BURST = /\bburst\s*>\s*0\b/;

function files(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? files(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
  );
}

/** Whether a source text (comments left out) branches on a kind. */
function branchesOnKind(text: string): boolean {
  const code = text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/\/\/.*$/gm, '');
  return CODE_IMPORT.test(code) || NAME.test(code) || BURST.test(code);
}

describe('what branches on a kind of limit outside the kinds', () => {
  it('is the listed files, no more and no fewer', () => {
    const found = files('src')
      .map((f) => relative('src', f))
      .filter((f) => !OWNERS.some((o) => o.test(f)))
      .filter((f) => branchesOnKind(readFileSync(join('src', f), 'utf8')))
      .sort();
    expect(found).toEqual(STILL_BRANCHING);
  });

  it('is seen in each of its forms, and not in comments', () => {
    expect(branchesOnKind("import { BUCKET, SLOTS } from '../config/kinds.js';")).toBe(true);
    expect(branchesOnKind("if (l.algorithm === 'token_bucket') return;")).toBe(true);
    expect(branchesOnKind('const bucket = limit.burst > 0;')).toBe(true);
    expect(branchesOnKind("// a 'token_bucket' with burst > 0\n/* FIXED */ const x = 1;")).toBe(false);
  });
});
