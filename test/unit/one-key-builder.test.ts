import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

// src/counters/keys.ts is the one key builder: every Redis key and suffix is made there, or handed to the Lua
// scripts in KEYS from there (check-and-incr.lua's header says which). This reads the code of every other source
// file (TypeScript and Lua, comments left out) for the suffixes keys.ts owns.

const SUFFIXES = [':rsv', '.exp', '.done', ':slots', ':h', ':rlqs', '.bucket'];
/** A suffix as code writes it: in a string or template literal, right after a quote, `}` or `..`. */
const built = (line: string, suffix: string): boolean => {
  const s = suffix.replace(/[.]/g, '\\.');
  return new RegExp(`(['"\`}]|\\.\\.\\s*['"])${s}(['"\`:.]|$)`).test(line);
};

function files(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = join(dir, e.name);
    if (e.isDirectory()) return files(p);
    return /\.(ts|lua)$/.test(e.name) ? [p] : [];
  });
}

/** A file's lines of code: comments (// and /* in TypeScript, -- and --[[ ]] in Lua) left out. */
function code(path: string): string[] {
  let text = readFileSync(path, 'utf8');
  text = path.endsWith('.lua')
    ? text.replace(/--\[\[[\s\S]*?\]\]/g, '').replace(/--.*$/gm, '')
    : text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/\/\/.*$/gm, '');
  return text.split('\n');
}

describe('the one key builder', () => {
  it('is the only source file that writes a key suffix', () => {
    const found = files('src')
      .filter((f) => !f.endsWith(join('counters', 'keys.ts')))
      .flatMap((f) => code(f).flatMap((line, i) => SUFFIXES.filter((s) => built(line, s)).map((s) => `${f}:${i + 1} ${s}`)));
    expect(found).toEqual([]);
  });

  it('would see one (the check reads what it claims to)', () => {
    const template = ['keys.push(`$', '{r.key}.exp`)'].join(''); // a template literal's text, as the source holds it
    expect(built(template, '.exp')).toBe(true);
    expect(built("hash = K[k_at + j] .. ':h'", ':h')).toBe(true);
    expect(built('const done = "x.done"', '.done')).toBe(false);
  });
});
