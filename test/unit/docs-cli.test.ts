import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadCommands } from '../../src/commands/index.js';
import { SERVE_OPTIONS, serveHelp } from '../../src/settings/settings.js';
import { defaultText } from '../../src/settings/table.js';
import { codeSpans, type Table, tablesOf } from '../helpers/markdown.js';

/** Every flag the code accepts (each command's parseArgs options, serve's settings table) is in its command's
 * --help and has its row in docs/cli.md, with the code's variable and default; every flag table elsewhere in
 * docs/ says the same. The lists come from the code, so a flag added without its row fails here. */

type ServeFlag = keyof typeof SERVE_OPTIONS;
const serveFlags = Object.keys(SERVE_OPTIONS) as ServeFlag[];
const COMMANDS = await loadCommands();
const others = Object.entries(COMMANDS).filter(([name]) => name !== 'serve');

/** `--name VALUE` → name. */
const flagName = (span: string): string | undefined => /^--([a-z0-9-]+)/.exec(span)?.[1];
const column = (t: Table, ...names: string[]): number => t.header.findIndex((h) => names.includes(h));

/** The rows of a flag table (a `flag` column and a variable column) as flag → variable and default cell; a cell
 * may name several flags and as many variables, in the same order. */
function flagRows(t: Table): { flag: string; env: string | undefined; defaultCell: string }[] {
  const [f, e, d] = [column(t, 'flag'), column(t, 'env', 'variable'), column(t, 'default')];
  if (f < 0 || e < 0 || d < 0) return [];
  return t.rows.flatMap((row) => {
    const envs = codeSpans(row[e] ?? '');
    const flags = codeSpans(row[f] ?? '').flatMap((s) => flagName(s) ?? []);
    return flags.map((flag, i) => ({ flag, env: envs[i], defaultCell: row[d] ?? '' }));
  });
}

/** What a row's default cell must say: the code's default as its first code span, or none for an unset one. */
function defaultProblem(flag: ServeFlag, cell: string): string | undefined {
  const want = SERVE_OPTIONS[flag].default;
  const spans = codeSpans(cell);
  if (want === '' ? spans.length === 0 : spans[0] === want) return undefined;
  return `--${flag}: default cell "${cell}", the code's default is ${want === '' ? 'unset (no code span)' : `\`${want}\``}`;
}

const cliTables = tablesOf('docs/cli.md');
const serveTable = cliTables.find((t) => t.header[0] === 'flag' && t.header.includes('env'));
const otherTable = cliTables.find((t) => t.header[0] === 'command' && t.header[1] === 'flag');

describe('--help names every flag', () => {
  it.each(Object.entries(COMMANDS))('tollgate %s --help', (_name, cmd) => {
    const help = cmd.help();
    const missing = Object.keys(cmd.options).filter((flag) => !new RegExp(`--${flag}(?![a-z0-9-])`).test(help));
    expect(missing).toEqual([]);
  });

  it('serve --help prints every default, an unset one as "unset"', () => {
    const help = serveHelp();
    expect(help.split('\n').filter((l) => /, default\s*$/.test(l))).toEqual([]);
    for (const flag of serveFlags) expect(help).toContain(`env ${SERVE_OPTIONS[flag].env}, default ${defaultText(SERVE_OPTIONS[flag].default)}`);
  });
});

describe("docs/cli.md's table of serve flags", () => {
  const rows = serveTable ? flagRows(serveTable) : [];

  it('is there', () => {
    expect(rows.length).toBeGreaterThan(40);
  });

  it('has a row for every flag, with its variable and default', () => {
    const problems = serveFlags.flatMap((flag) => {
      const row = rows.find((r) => r.flag === flag);
      if (!row) return [`--${flag}: no row`];
      if (row.env !== SERVE_OPTIONS[flag].env) return [`--${flag}: variable ${row.env}, the code reads ${SERVE_OPTIONS[flag].env}`];
      return defaultProblem(flag, row.defaultCell) ?? [];
    });
    expect(problems).toEqual([]);
  });

  it('names no flag serve does not have, and each once', () => {
    expect(rows.map((r) => r.flag).filter((f) => !Object.hasOwn(SERVE_OPTIONS, f))).toEqual([]);
    expect(rows.length).toBe(new Set(rows.map((r) => r.flag)).size);
  });
});

describe("docs/cli.md's table of the other commands' flags", () => {
  const pairs = (otherTable?.rows ?? []).flatMap((row) =>
    codeSpans(row[0] ?? '').flatMap((command) => codeSpans(row[1] ?? '').flatMap((s) => ({ command, flag: flagName(s) ?? s, defaultCell: row[2] ?? '' }))),
  );

  it('has a row for every flag of every command, with its default', () => {
    expect(pairs.length).toBeGreaterThan(20);
    const problems = others.flatMap(([command, cmd]) =>
      Object.entries(cmd.options).flatMap(([flag, o]) => {
        const row = pairs.find((p) => p.command === command && p.flag === flag);
        if (!row) return [`${command} --${flag}: no row`];
        const want = o.type === 'string' && typeof o.default === 'string' ? o.default : undefined;
        return want === undefined || codeSpans(row.defaultCell).includes(want) ? [] : [`${command} --${flag}: default is \`${want}\``];
      }),
    );
    expect(problems).toEqual([]);
  });

  it('names no command or flag the code does not have', () => {
    const stale = pairs.filter((p) => !Object.hasOwn(COMMANDS, p.command) || p.command === 'serve' || !Object.hasOwn(COMMANDS[p.command]!.options, p.flag));
    expect(stale).toEqual([]);
  });
});

describe('every flag table in docs/ agrees with the code', () => {
  const pages = readdirSync('docs')
    .filter((f) => f.endsWith('.md'))
    .map((f) => join('docs', f));

  it.each(pages)('%s', (page) => {
    const problems = tablesOf(page)
      .flatMap(flagRows)
      .flatMap((row) => {
        if (!Object.hasOwn(SERVE_OPTIONS, row.flag)) return [`--${row.flag}: no such serve flag`];
        const flag = row.flag as ServeFlag;
        if (row.env !== SERVE_OPTIONS[flag].env) return [`--${flag}: variable ${row.env}, the code reads ${SERVE_OPTIONS[flag].env}`];
        return defaultProblem(flag, row.defaultCell) ?? [];
      });
    expect(problems).toEqual([]);
  });
});
