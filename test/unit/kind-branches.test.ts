import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';

// A kind of limit owns all about itself (issue 60): nothing outside its own files branches on its code, its name
// or its burst (meaning "a bucket"); everything else asks the kind (src/limits/kinds/algorithm.ts: slots,
// refills, capacity, per, shown, …). This scans the code of src/ (comments left out) for
//   - an import of a kind's own module (src/limits/kinds/<kind>.ts; the registry, index.ts, and the interface,
//     algorithm.ts, are for everyone), or a kind's code read by its name (KIND_CODES.token_bucket),
//   - a kind's name as a string ('fixed_window', 'sliding_window', 'token_bucket', 'in_flight'),
//   - a limit's burst compared with 0 (`l.burst > 0`, `=== 0`, `!== 0`),
// outside the kinds themselves (src/limits/kinds/) and the config types that name them (src/config/spec.ts).
// None does: a file that starts to fails this test.

const OWNERS = [/^limits\/kinds\//, /^config\/spec\.ts$/];
/** Files that name a kind's name for something else: Envoy's RLQS strategy `token_bucket` (its
 * RateLimitStrategy), counted by strategy in an RLQS summary, is not a kind of limit. */
const NOT_A_KIND = ['response/assignment-summary.ts', 'rlqs/summary.ts'];

const KIND_MODULE = /from\s*'[^']*limits\/kinds\/(?!index\.js|algorithm\.js)[^']*'/;
const CODE_BY_NAME = /\bKIND_CODES\s*(\.\s*\w|\[\s*['"`])/;
const NAME = /['"`](fixed_window|sliding_window|token_bucket|in_flight)['"`]/;
const BURST = /\.burst\s*(>|===|!==|==|!=)\s*0\b/;

function files(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? files(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
  );
}

/** Whether a source text (comments left out) branches on a kind. */
function branchesOnKind(text: string): boolean {
  const code = text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/\/\/.*$/gm, '');
  return KIND_MODULE.test(code) || CODE_BY_NAME.test(code) || NAME.test(code) || BURST.test(code);
}

describe('what branches on a kind of limit outside the kinds', () => {
  it('is nothing', () => {
    const found = files('src')
      .map((f) => relative('src', f))
      .filter((f) => !OWNERS.some((o) => o.test(f)) && !NOT_A_KIND.includes(f))
      .filter((f) => branchesOnKind(readFileSync(join('src', f), 'utf8')))
      .sort();
    expect(found).toEqual([]);
  });

  it('is seen in each of its forms, and not in comments', () => {
    expect(branchesOnKind("import { tokenBucket } from '../limits/kinds/token-bucket.js';")).toBe(true);
    expect(branchesOnKind('const code = KIND_CODES.in_flight;')).toBe(true);
    expect(branchesOnKind("if (l.algorithm === 'token_bucket') return;")).toBe(true);
    expect(branchesOnKind('const bucket = limit.burst > 0;')).toBe(true);
    expect(branchesOnKind('if (l.burst === 0) return;')).toBe(true);
    expect(branchesOnKind("// a 'token_bucket' with burst > 0\n/* FIXED */ const x = 1;")).toBe(false);
    // What asks the kind, and the registry's own exports, are not branches.
    expect(branchesOnKind("import { ALGORITHMS, KIND_CODES } from '../limits/kinds/index.js';\nconst b = ALGORITHMS[l.kind]!.refills;")).toBe(false);
    // A count of something else named burst is not a limit's burst.
    expect(branchesOnKind('let burst = 0;\nif (burst > 0) burst--;')).toBe(false);
  });
});
