import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

/** The house rules of CONTRIBUTING.md, held by a test rather than by review: files in src/ under 350 lines,
 * functions and methods under 60. A file or function past them is split by what it does before it grows
 * further; the bound is a prompt to find the seam, not a target. Functions are found by the TypeScript
 * parser (not a pattern), so arrow functions, methods, accessors and constructors all count. */

const MAX_FILE_LINES = 350;
const MAX_FUNCTION_LINES = 60;

/** Files allowed past both bounds, each for a stated reason; a file that is back within them leaves the list. */
const EXEMPT: string[] = [];

function files(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    return e.isDirectory() ? files(path) : [path];
  });
}

function lineCount(text: string): number {
  return text.split('\n').length - (text.endsWith('\n') ? 1 : 0);
}

/** Every function with a body, and its lines from the line it is declared on to the one its body closes on. */
function functionLengths(path: string, text: string): { name: string; lines: number }[] {
  const source = ts.createSourceFile(path, text, ts.ScriptTarget.Latest, true);
  const found: { name: string; lines: number }[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isFunctionLike(node) && 'body' in node && node.body) {
      const first = source.getLineAndCharacterOfPosition(node.getStart(source)).line;
      const last = source.getLineAndCharacterOfPosition(node.getEnd()).line;
      const name = node.name?.getText(source) ?? (ts.isConstructorDeclaration(node) ? 'constructor' : 'anonymous');
      found.push({ name: `${path}:${first + 1} ${name}`, lines: last - first + 1 });
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

const sources = files('src').map((path) => ({ path: relative('.', path), text: readFileSync(path, 'utf8') }));
const typescript = sources.filter((f) => f.path.endsWith('.ts'));

describe('code size in src/', () => {
  it('finds every kind of function (declarations, methods, arrows, accessors, constructors)', () => {
    const sample = 'function a() {\n}\nclass B {\n  constructor() {}\n  get c() {\n    return 1;\n  }\n  d = () => {\n  };\n}\n';
    expect(functionLengths('sample.ts', sample).map((f) => f.lines)).toEqual([2, 1, 3, 2]);
  });

  it(`files are at most ${MAX_FILE_LINES} lines`, () => {
    const over = sources.filter((f) => !EXEMPT.includes(f.path) && lineCount(f.text) > MAX_FILE_LINES);
    expect(over.map((f) => `${f.path} (${lineCount(f.text)})`)).toEqual([]);
  });

  it(`functions and methods are at most ${MAX_FUNCTION_LINES} lines`, () => {
    const over = typescript.filter((f) => !EXEMPT.includes(f.path)).flatMap((f) => functionLengths(f.path, f.text));
    expect(over.filter((f) => f.lines > MAX_FUNCTION_LINES).map((f) => `${f.name} (${f.lines})`)).toEqual([]);
  });

  it('an exemption still exempts something: a file back within the bounds, or gone, leaves the list', () => {
    const stale = EXEMPT.filter((path) => {
      const file = sources.find((f) => f.path === path);
      return !file || (lineCount(file.text) <= MAX_FILE_LINES && functionLengths(path, file.text).every((f) => f.lines <= MAX_FUNCTION_LINES));
    });
    expect(stale).toEqual([]);
  });
});
