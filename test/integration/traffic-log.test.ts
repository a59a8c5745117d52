import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { fingerprint } from '../../src/fingerprint.js';
import { detectFormat, MAX_LINE_CHARS, type ReadOptions, readTraffic, type TrafficLine } from '../../src/tuning/traffic.js';
import { runCli } from '../helpers/process.js';

const T0 = Date.UTC(2026, 10, 21, 10, 0, 0);

function file(name: string, text: string): string {
  const path = join(mkdtempSync(join(tmpdir(), 'tollgate-traffic-')), name);
  writeFileSync(path, text);
  return path;
}

const json = (i: number, token = 'Bearer t'): string =>
  JSON.stringify({ timestamp: new Date(T0 + i * 10).toISOString(), method: 'GET', path: '/invoices', authorization: token });

async function read(path: string, opts: ReadOptions = {}): Promise<{ lines: TrafficLine[]; bad: [number, string][] }> {
  const bad: [number, string][] = [];
  const lines: TrafficLine[] = [];
  for await (const l of readTraffic(path, { ...opts, onBadLine: (n, reason) => bad.push([n, reason]) })) lines.push(l);
  return { lines, bad };
}

describe('traffic logs: the format is decided once per file', () => {
  it('a comment, a line of spaces and a truncated last line in JSON lines: bad lines by number, the rest read as JSON', async () => {
    const path = file('t.jsonl', ['# exported from the gateway', json(0), '   ', json(1), '{"timestamp": "2026-11-21T10:00:00Z", "met'].join('\n'));
    const { lines, bad } = await read(path);
    expect(lines).toHaveLength(2);
    expect(bad).toEqual([
      [1, 'not valid JSON'],
      [5, 'not valid JSON'],
    ]);
  });

  it('by extension, else by the first non-blank line; --format overrides', () => {
    expect(detectFormat(file('a.jsonl', 'timestamp,method\n'))).toBe('jsonl');
    expect(detectFormat(file('a.csv', '{"x":1}\n'))).toBe('csv');
    expect(detectFormat(file('a.log', '\n\n  {"timestamp": 1}\n'))).toBe('jsonl');
    expect(detectFormat(file('a.log', '# comment\n{"timestamp": 1}\n'))).toBe('csv');
  });

  it('--format jsonl reads a log whose first line is a comment as JSON, not as a CSV header', async () => {
    const path = file('gateway.log', `# comment\n${json(0)}\n${json(1)}\n`);
    const { lines, bad } = await read(path, { format: 'jsonl' });
    expect([lines.length, bad]).toEqual([2, [[1, 'not valid JSON']]]);
  });

  it('CSV fields in quotes may hold commas and quotes (csv-parse)', async () => {
    const path = file('t.csv', `timestamp,method,path,authorization\n${T0 / 1000},GET,"/invoices/a,b","Bearer x,""y"""\n${T0 / 1000},GET,/modules,plain\n`);
    const { lines, bad } = await read(path);
    expect(bad).toEqual([]);
    expect(lines.map((l) => [l.path, l.authorization])).toEqual([
      ['/invoices/a,b', 'Bearer x,"y"'],
      ['/modules', 'plain'],
    ]);
  });

  it('CSV: a short row and an unclosed quote are bad lines whose reason never quotes the field', async () => {
    const path = file('t.csv', `timestamp,method,path,authorization\n${T0 / 1000},GET\n${T0 / 1000},GET,/m,ok\n${T0 / 1000},GET,/m,"Bearer secret-token\n`);
    const { lines, bad } = await read(path);
    expect(lines).toHaveLength(1);
    expect(bad.map(([n]) => n)).toEqual([2, 4]);
    expect(bad.map(([, r]) => r).join(' ')).not.toContain('secret');
  });

  it('a line longer than the bound is a bad line', async () => {
    const long = JSON.stringify({ timestamp: T0, method: 'GET', path: `/${'x'.repeat(MAX_LINE_CHARS)}` });
    const { lines, bad } = await read(file('t.jsonl', `${json(0)}\n${long}\n${json(1)}\n`));
    expect([lines.length, bad]).toEqual([2, [[2, `longer than ${MAX_LINE_CHARS} characters`]]]);
  });
});

describe('simulate with bad lines', () => {
  const log = (): string =>
    file(
      't.jsonl',
      [
        '# header comment',
        json(0, 'Bearer a'),
        '{"method": "GET"}',
        json(1, 'Bearer a'),
        '{"timestamp": "not a time", "method": "GET", "path": "/x", "authorization": "Bearer secret-token"}',
        '{trunc',
      ].join('\n'),
    );

  it('fails, naming every bad line by number in one line, without reporting', async () => {
    const run = await runCli(['simulate', '--traffic', log()]);
    expect(run.code).toBe(1);
    expect(run.stdout).toBe('');
    expect(run.stderr.split('\n')).toHaveLength(2);
    expect(run.stderr).toMatch(/t\.jsonl: 4 bad lines: line 1: not valid JSON; line 3: needs a timestamp, a method and a path .*; /);
    expect(run.stderr).toMatch(
      /; line 5: cannot read the time \(10 characters; .*\); line 6: not valid JSON \(nothing reported; --skip-bad-lines replays the other lines\)/,
    );
    expect(run.stderr).not.toContain('secret-token');
  });

  it('--skip-bad-lines replays the others and warns', async () => {
    const run = await runCli(['simulate', '--traffic', log(), '--skip-bad-lines', '--json']);
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout)).toMatchObject({ lines: 2, admitted: 2 });
    expect(run.stderr).toMatch(/^tollgate: warning: .*t\.jsonl: 4 bad lines: .* \(skipped\)\n$/);
  });

  it('many bad lines: the first ten by number, then a count', async () => {
    const run = await runCli(['simulate', '--traffic', file('t.jsonl', `${Array.from({ length: 25 }, () => 'nope').join('\n')}\n${json(0)}\n`)]);
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/25 bad lines: line 1: not valid JSON; .*line 10: not valid JSON; and 15 more/);
  });

  it('a CSV header without a needed column is one error', async () => {
    const run = await runCli(['simulate', '--traffic', file('t.csv', `when,method,path\n1,GET,/m\n`)]);
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/t\.csv:1: the CSV header has no timestamp column \(accepted names: timestamp, time, start_time/);
  });

  it('fingerprints in a quoted CSV field are read as such', async () => {
    const fp = fingerprint('c');
    const rows = Array.from({ length: 7 }, (_, i) => `"${new Date(T0 + i).toISOString()}","POST","/invoices","${fp}"`);
    const run = await runCli(['simulate', '--traffic', file('t.csv', `timestamp,method,path,fingerprint\n${rows.join('\n')}\n`), '--json']);
    expect(JSON.parse(run.stdout).topLimited).toEqual([{ fingerprint: fp, requests: 7, rejected: 2 }]);
  });

  it('a fingerprint field that is not one (a token pasted by mistake) is a bad line, never printed', async () => {
    const line = (fp: string): string => JSON.stringify({ timestamp: new Date(T0).toISOString(), method: 'GET', path: '/invoices', fingerprint: fp });
    const run = await runCli([
      'simulate',
      '--traffic',
      file('t.jsonl', `${line(fingerprint('ok'))}\n${line('Bearer secret-token-value')}\n`),
      '--report',
      file('r.html', ''),
    ]);
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/line 2: the fingerprint field is not one \(25 characters; expected 32 hex/);
    expect(run.stderr + run.stdout).not.toContain('secret-token-value');
  });
});
