import { closeSync, fsyncSync, openSync, readdirSync, readFileSync, statSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import type { UsageEvent } from '../store/usage-ledger.js';

export type UsageFormat = 'ndjson' | 'csv';

/** A file of the export is closed for a new one past this size: a restart reads the newest two whole. */
const ROTATE_BYTES = 16 * 1024 * 1024;
const COLUMNS = ['stream', 'id', 't', 'domain', 'rule', 'window', 'counter', 'outcome', 'tokens', 'estimate', 'rid', 'values'] as const;
const NAME = /^usage-\d{8}T\d{9}-\d+-\d{6}\.(ndjson|csv)$/;

/** What an export directory says was written: each event by stream and id, read from the newest two files (an
 * event in flight when an exporter stopped is in the newest: files turn only between batches), and the highest
 * numbered id of a stream (a memory ring's). */
export interface Written {
  has(stream: string, id: string): boolean;
  lastNumbered(stream: string): number;
}

/** The events of an export, appended to files in a directory of its own (usage-<time>-<n>.ndjson or .csv), each
 * batch written whole and synced to disk before the exporter acknowledges it: so the files, not the
 * acknowledgement, say what was exported, and an exporter stopped between the two finds on restart what it had
 * written and acknowledges it without writing it again. */
export class UsageFiles {
  private fd: number | undefined;
  private bytes = 0;
  private seq = 0;

  constructor(
    private readonly dir: string,
    private readonly format: UsageFormat,
  ) {}

  /** What the directory's newest files hold (a line cut short by a crash is skipped). */
  written(): Written {
    const files = readdirSync(this.dir)
      .filter((f) => NAME.test(f))
      .sort()
      .slice(-2);
    const seen = new Set<string>();
    const last = new Map<string, number>();
    for (const f of files) {
      for (const line of readFileSync(join(this.dir, f), 'utf8').split('\n')) {
        const at = f.endsWith('.csv') ? fromCsv(line) : fromJson(line);
        if (!at) continue;
        seen.add(`${at[0]}/${at[1]}`);
        if (/^\d+$/.test(at[1])) last.set(at[0], Math.max(last.get(at[0]) ?? 0, Number(at[1])));
      }
    }
    return { has: (stream, id) => seen.has(`${stream}/${id}`), lastNumbered: (stream) => last.get(stream) ?? 0 };
  }

  /** Appends the events and syncs them to disk. */
  write(events: readonly UsageEvent[]): void {
    if (events.length === 0) return;
    if (this.fd === undefined || this.bytes >= ROTATE_BYTES) this.open();
    const text = Buffer.from(`${events.map((e) => (this.format === 'csv' ? toCsv(e) : JSON.stringify(e))).join('\n')}\n`);
    // All of it, or an error before anything is acknowledged (a full disk throws; a short write goes on).
    for (let at = 0; at < text.length; ) at += writeSync(this.fd!, text, at);
    this.bytes += text.length;
    fsyncSync(this.fd!);
  }

  close(): void {
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
  }

  private open(): void {
    this.close();
    const stamp = new Date().toISOString().replace(/[-:.Z]/g, '');
    const file = join(this.dir, `usage-${stamp}-${process.pid}-${String(this.seq++).padStart(6, '0')}.${this.format}`);
    this.fd = openSync(file, 'ax');
    this.bytes = statSync(file).size;
    if (this.format === 'csv') this.bytes += writeSync(this.fd, `${COLUMNS.join(',')}\n`);
  }
}

function fromJson(line: string): [string, string] | undefined {
  if (!line.startsWith('{')) return undefined;
  try {
    const e = JSON.parse(line) as Partial<UsageEvent>;
    return typeof e.stream === 'string' && typeof e.id === 'string' ? [e.stream, e.id] : undefined;
  } catch {
    return undefined;
  }
}

/** A whole CSV line as toCsv writes it: a line cut short (by a crash mid-write) does not match, nor the header. */
const QUOTED = '"(?:[^"]|"")*"';
const CSV_LINE = new RegExp(`^([^,"]*),([^,"]+),\\d+,${QUOTED},${QUOTED},${QUOTED},[^,"]*,[a-z]+,-?\\d+,\\d+,[^,"]*,${QUOTED}$`);

/** A CSV event's stream and id (the first two columns, never quoted: a stream name and an id). */
function fromCsv(line: string): [string, string] | undefined {
  const m = CSV_LINE.exec(line);
  return m ? [m[1]!, m[2]!] : undefined;
}

/** One event as a CSV line (RFC 4180: text fields quoted, quotes doubled); `values` last, so a cut line shows. */
function toCsv(e: UsageEvent): string {
  const q = (s: string) => `"${s.replace(/"/g, '""')}"`;
  return [e.stream, e.id, e.t, q(e.domain), q(e.rule), q(e.window), e.counter, e.outcome, e.tokens, e.estimate, e.rid, q(e.values)].join(',');
}
