import { readFileSync } from 'node:fs';

/** A Markdown table of a page: its header cells (lower case) and each row's cells, as written. */
export interface Table {
  header: string[];
  rows: string[][];
}

/** The cells of one table line: split on '|' but not on an escaped '\|' (a pipe inside a code span). */
function cells(line: string): string[] {
  return line
    .trim()
    .replace(/^\||\|$/g, '')
    .split(/(?<!\\)\|/)
    .map((c) => c.trim());
}

/** Every table of a Markdown file, outside code blocks. */
export function tablesOf(file: string): Table[] {
  const lines = readFileSync(file, 'utf8')
    .replace(/```[\s\S]*?```/g, '')
    .split('\n');
  const tables: Table[] = [];
  for (let i = 0; i + 1 < lines.length; i++) {
    if (!lines[i]!.startsWith('|') || !/^\|[-| :]+\|$/.test(lines[i + 1]!.trim())) continue;
    const table: Table = { header: cells(lines[i]!).map((c) => c.toLowerCase()), rows: [] };
    for (i += 2; i < lines.length && lines[i]!.startsWith('|'); i++) table.rows.push(cells(lines[i]!));
    tables.push(table);
  }
  return tables;
}

/** The code spans of a cell, in order (`--flag N` gives '--flag N'). */
export const codeSpans = (cell: string): string[] => [...cell.matchAll(/`([^`]+)`/g)].map((m) => m[1]!.replaceAll('\\|', '|'));
