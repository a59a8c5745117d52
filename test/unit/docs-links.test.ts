import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { describe, expect, it } from 'vitest';

/** Every relative link of the project's Markdown (README, BENCHMARKS, CHANGELOG, docs/) names a file that
 * exists, and every #anchor a heading of that file (GitHub's slugs), so moving a section cannot strand a
 * link; and every page of docs/ is reachable from README. */

const PAGES = [
  'README.md',
  'BENCHMARKS.md',
  'CHANGELOG.md',
  'CONTRIBUTING.md',
  ...readdirSync('docs')
    .filter((f) => f.endsWith('.md'))
    .map((f) => join('docs', f)),
];

/** GitHub's anchor for a heading: lower case, punctuation but '-' and '_' dropped, spaces to '-'. */
function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\- _]/gu, '')
    .replace(/ /g, '-');
}

function anchorsOf(file: string): Set<string> {
  const text = readFileSync(file, 'utf8').replace(/```[\s\S]*?```/g, '');
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const m of text.matchAll(/^#{1,6} (.+)$/gm)) {
    const base = slug(m[1]!);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

/** [label](target) outside code blocks and code spans; absolute URLs and mailto: are not checked here. */
function linksOf(file: string): string[] {
  const text = readFileSync(file, 'utf8')
    .replace(/```[\s\S]*?```/g, '')
    .replace(/`[^`\n]*`/g, '');
  return [...text.matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1]!).filter((t) => !/^[a-z]+:/i.test(t));
}

describe('links in the documentation', () => {
  it('reads every page', () => {
    expect(PAGES.length).toBeGreaterThan(10);
    expect(PAGES.flatMap(linksOf).length).toBeGreaterThan(30);
  });

  it.each(PAGES)('%s: every relative link and anchor resolves', (page) => {
    const broken: string[] = [];
    for (const target of linksOf(page)) {
      const [path, anchor] = target.split('#') as [string, string | undefined];
      const file = path === '' ? page : normalize(join(dirname(page), path));
      if (!existsSync(file)) {
        broken.push(`${target}: no ${file}`);
        continue;
      }
      if (anchor && statSync(file).isFile() && file.endsWith('.md') && !anchorsOf(file).has(anchor)) broken.push(`${target}: no heading #${anchor} in ${file}`);
    }
    expect(broken).toEqual([]);
  });

  it('README links every page of docs/', () => {
    const linked = new Set(linksOf('README.md').map((t) => t.split('#')[0]));
    const pages = readdirSync('docs')
      .filter((f) => f.endsWith('.md'))
      .map((f) => `docs/${f}`);
    expect(pages.filter((p) => !linked.has(p))).toEqual([]);
  });

  it('README stays a map: at most 200 lines', () => {
    expect(readFileSync('README.md', 'utf8').trimEnd().split('\n').length).toBeLessThanOrEqual(200);
  });
});
