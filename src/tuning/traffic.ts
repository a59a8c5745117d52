import { closeSync, createReadStream, openSync, readSync } from 'node:fs';
import { extname } from 'node:path';
import type { Readable } from 'node:stream';
import { type CsvError, parse as parseCsv } from 'csv-parse';
import { MAX_UINT32 } from '../config/units.js';
import { UserError } from '../errors.js';
import { asFingerprint, FINGERPRINT_LENGTH } from '../fingerprint.js';

/** One request of a traffic log, as the simulator needs it. */
export interface TrafficLine {
  timeMs: number;
  method: string;
  path: string;
  /** The Authorization header, when the log has it. */
  authorization?: string;
  /** The token's fingerprint, when the log has only that (as Tollgate's own tools print it). */
  fingerprint?: string;
  /** What the request cost (hits_addend: tokens, rows), when the log says; else 1. With an Envoy route whose
   * hits_addend reads the response (an AI gateway's token count), what the response cost, charged at its end. */
  cost?: number;
  /** How long the stream ran (whole milliseconds), when the log says: its stream-done call is replayed then. */
  durationMs?: number;
  /** Other request headers the log has (`x-…` fields, or a JSON `headers` object), lower-case names: what
   * Envoy's request_headers actions read (x-tenant-id, x-request-id, a model header). */
  headers?: Record<string, string>;
  /** The line's number in the file, for messages. */
  n?: number;
}

export class TrafficError extends UserError {
  override readonly name = 'TrafficError';
}

export type TrafficFormat = 'jsonl' | 'csv';
export const TRAFFIC_FORMATS = ['auto', 'jsonl', 'csv'] as const;

export interface ReadOptions {
  /** auto (default): by extension (.jsonl, .ndjson, .json / .csv), else by the first non-blank line. */
  format?: (typeof TRAFFIC_FORMATS)[number];
  /** Hears the bytes read so far every 50,000 lines. */
  onProgress?: (bytesRead: number) => void;
  /** A line that is not a request: its number and why (never its text, which may hold a token). Without
   * it, the first bad line ends the read with a TrafficError. */
  onBadLine?: (line: number, reason: string) => void;
}

/** Longest line read, in characters: a longer one is a bad line, and is never held whole in memory. */
export const MAX_LINE_CHARS = 1024 * 1024;

/** Field names accepted for each column, in JSON lines or a CSV header: ours, and those of Envoy's JSON access
 * logs (`start_time`, `method`, `path`, `x-envoy-original-path`, `authorization`). */
const ALIASES: Record<Exclude<keyof TrafficLine, 'headers' | 'n'>, string[]> = {
  timeMs: ['timestamp', 'time', 'start_time', '@timestamp', 'ts'],
  method: ['method', ':method', 'request_method'],
  path: ['path', 'x-envoy-original-path', ':path', 'request_path', 'url'],
  authorization: ['authorization', 'token', 'req_authorization'],
  fingerprint: ['fingerprint', 'token_fingerprint'],
  cost: ['cost', 'hits', 'hits_addend', 'tokens'],
  // Envoy's %DURATION% (and %RESPONSE_DURATION%-style fields named so): milliseconds.
  durationMs: ['duration_ms', 'duration', 'latency_ms'],
};

/** Longest duration read: a day. A stream's end is replayed that long after its start. */
export const MAX_DURATION_MS = 86_400_000;
/** Most header fields a line may carry. */
export const MAX_HEADERS = 32;

/** Reads a traffic log, one request per line. The format is decided once for the whole file, so one odd
 * line (a comment, a truncated last line) is one bad line, never a switch of parser. Blank lines are skipped. */
export async function* readTraffic(file: string, opts: ReadOptions = {}): AsyncGenerator<TrafficLine> {
  const format = !opts.format || opts.format === 'auto' ? detectFormat(file) : opts.format;
  const bad =
    opts.onBadLine ??
    ((n: number, reason: string) => {
      throw new TrafficError(`${file}:${n}: ${reason}`);
    });
  const input = createReadStream(file, 'utf8');
  const records = format === 'csv' ? csvRecords(file, input, bad) : jsonRecords(input, bad);
  let count = 0;
  for await (const { n, record } of records) {
    if (opts.onProgress && ++count % 50_000 === 0) opts.onProgress(input.bytesRead);
    const line = toLine(record, n);
    if (typeof line === 'string') bad(n, line);
    else yield line;
  }
}

/** By extension; else by the first non-blank line: `{` starts JSON lines, anything else is a CSV header. */
export function detectFormat(file: string): TrafficFormat {
  const ext = extname(file).toLowerCase();
  if (['.jsonl', '.ndjson', '.json'].includes(ext)) return 'jsonl';
  if (ext === '.csv') return 'csv';
  const fd = openSync(file, 'r');
  try {
    const buf = Buffer.alloc(64 * 1024);
    const text = buf.toString('utf8', 0, readSync(fd, buf, 0, buf.length, 0));
    return text.trimStart().startsWith('{') ? 'jsonl' : 'csv';
  } finally {
    closeSync(fd);
  }
}

interface NumberedRecord {
  n: number;
  record: Record<string, unknown>;
}

async function* jsonRecords(input: Readable, bad: (n: number, reason: string) => void): AsyncGenerator<NumberedRecord> {
  for await (const { n, text } of boundedLines(input)) {
    if (text === undefined) {
      bad(n, `longer than ${MAX_LINE_CHARS} characters`);
      continue;
    }
    if (text.trim() === '') continue;
    let record: unknown;
    try {
      record = JSON.parse(text);
    } catch {
      bad(n, 'not valid JSON');
      continue;
    }
    if (record === null || typeof record !== 'object' || Array.isArray(record)) bad(n, 'not a JSON object');
    else yield { n, record: record as Record<string, unknown> };
  }
}

/** Lines of a stream with their numbers; a line over MAX_LINE_CHARS comes as `text: undefined`, and its
 * characters past the bound are dropped as they arrive. */
async function* boundedLines(input: Readable): AsyncGenerator<{ n: number; text: string | undefined }> {
  let pending: string | undefined = '';
  let n = 0;
  for await (const chunk of input as AsyncIterable<string>) {
    let start = 0;
    for (let nl = chunk.indexOf('\n'); nl !== -1; nl = chunk.indexOf('\n', start)) {
      const text: string | undefined = pending === undefined ? undefined : pending + chunk.slice(start, nl);
      yield { n: ++n, text: text !== undefined && text.length <= MAX_LINE_CHARS ? text : undefined };
      pending = '';
      start = nl + 1;
    }
    if (pending !== undefined) pending += chunk.slice(start);
    if (pending !== undefined && pending.length > MAX_LINE_CHARS) pending = undefined;
  }
  if (pending === undefined || pending !== '') yield { n: ++n, text: pending };
}

/** What a CSV error means, without the parser's message, which quotes the field (a token, perhaps). */
const CSV_REASONS: Record<string, string> = {
  CSV_RECORD_INCONSISTENT_FIELDS_LENGTH: 'has a different number of fields than the header',
  CSV_RECORD_INCONSISTENT_COLUMNS: 'has a different number of fields than the header',
  CSV_QUOTE_NOT_CLOSED: 'a quoted field is not closed',
  INVALID_OPENING_QUOTE: 'a quote inside an unquoted field',
  CSV_INVALID_CLOSING_QUOTE: 'text after a closing quote',
  CSV_NON_TRIMABLE_CHAR_AFTER_CLOSING_QUOTE: 'text after a closing quote',
  CSV_MAX_RECORD_SIZE: `longer than ${MAX_LINE_CHARS} characters`,
};

/** CSV with a header row, parsed by csv-parse: quoted fields may hold commas, quotes and line breaks. */
async function* csvRecords(file: string, input: Readable, bad: (n: number, reason: string) => void): AsyncGenerator<NumberedRecord> {
  let header: string[] | undefined;
  const parser = input.pipe(
    parseCsv({
      columns: (h: string[]) => (header = h.map((c) => c.trim().toLowerCase())),
      skip_empty_lines: true,
      trim: true,
      info: true,
      max_record_size: MAX_LINE_CHARS,
      skip_records_with_error: true,
      on_skip: (err: CsvError | undefined) => void bad(Number(err?.lines ?? 0), CSV_REASONS[err?.code ?? ''] ?? 'not a CSV record'),
    }),
  );
  let checked = false;
  for await (const { record, info } of parser as AsyncIterable<{ record: Record<string, string>; info: { lines: number } }>) {
    if (!checked) checkHeader(file, header ?? []);
    checked = true;
    yield { n: info.lines, record };
  }
}

/** A header without a needed column would make every line bad: one error instead. */
function checkHeader(file: string, header: readonly string[]): void {
  for (const field of ['timeMs', 'method', 'path'] as const) {
    if (!ALIASES[field].some((name) => header.includes(name))) {
      throw new TrafficError(
        `${file}:1: the CSV header has no ${field === 'timeMs' ? 'timestamp' : field} column (accepted names: ${ALIASES[field].join(', ')})`,
      );
    }
  }
}

function pick(record: Record<string, unknown>, field: keyof typeof ALIASES): unknown {
  for (const name of ALIASES[field]) {
    const v = record[name];
    if (v !== undefined && v !== null && v !== '' && v !== '-') return v;
  }
  return undefined;
}

/** The request of a record, or why it is none. */
function toLine(record: Record<string, unknown>, n: number): TrafficLine | string {
  const time = pick(record, 'timeMs');
  const method = pick(record, 'method');
  const path = pick(record, 'path');
  if (time === undefined || method === undefined || path === undefined) {
    return `needs a timestamp, a method and a path (fields: ${ALIASES.timeMs[0]}, method, path)`;
  }
  const timeMs = parseTime(time);
  if (timeMs === undefined) return `cannot read the time (${String(time).length} characters; ISO 8601 or Unix seconds or milliseconds)`;
  const out: TrafficLine = { timeMs, method: String(method).toUpperCase(), path: String(path), n };
  const cost = pick(record, 'cost');
  if (cost !== undefined) {
    const c = Number(cost);
    if (!Number.isInteger(c) || c < 0 || c > MAX_UINT32) return `the cost is not a whole number from 0 to ${MAX_UINT32}`;
    out.cost = c;
  }
  const duration = pick(record, 'durationMs');
  if (duration !== undefined) {
    const n = Number(duration);
    if (!Number.isInteger(n) || n < 0 || n > MAX_DURATION_MS)
      return `the duration is not a whole number of milliseconds from 0 to ${MAX_DURATION_MS} (24 hours)`;
    out.durationMs = n;
  }
  const headers = headersOf(record);
  if (typeof headers === 'string') return headers;
  const auth = pick(record, 'authorization') ?? headers?.authorization;
  if (headers) {
    // The Authorization value is the client's token, replayed and reported as the other columns say.
    delete headers.authorization;
    if (Object.keys(headers).length > 0) out.headers = headers;
  }
  const fp = pick(record, 'fingerprint');
  if (auth !== undefined) out.authorization = String(auth);
  else if (fp !== undefined) {
    // Printed as given in reports: it must be one (32 or 64 hex characters), never a token by mistake.
    const checked = asFingerprint(String(fp));
    if (checked === undefined)
      return `the fingerprint field is not one (${String(fp).length} characters; expected ${FINGERPRINT_LENGTH} hex, as tollgate fingerprint prints)`;
    out.fingerprint = checked;
  }
  return out;
}

/** The `x-…` fields and a JSON `headers` object's fields, by lower-case name; or why they are not headers. */
function headersOf(record: Record<string, unknown>): Record<string, string> | string | undefined {
  let out: Record<string, string> | undefined;
  let count = 0;
  const add = (name: string, v: unknown): string | undefined => {
    if (v === undefined || v === null || v === '' || v === '-') return undefined;
    if (typeof v !== 'string' && typeof v !== 'number') return 'a header field is not text';
    if (!/^[a-z0-9-]{1,256}$/.test(name)) return `a header field name is not one (${name.length} characters; letters, digits and -)`;
    if (++count > MAX_HEADERS) return `more than ${MAX_HEADERS} header fields`;
    out ??= {};
    out[name] = String(v);
    return undefined;
  };
  for (const k in record) {
    // x- or X-, told apart without lower-casing every field name of every line.
    if ((k.charCodeAt(0) | 0x20) !== 0x78 || k.charCodeAt(1) !== 0x2d) continue;
    const bad = add(k.toLowerCase(), record[k]);
    if (bad) return bad;
  }
  const nested = record.headers;
  if (nested !== undefined && (nested === null || typeof nested !== 'object' || Array.isArray(nested))) return 'the headers field is not an object';
  for (const [k, v] of Object.entries((nested ?? {}) as Record<string, unknown>)) {
    const bad = add(k.toLowerCase(), v);
    if (bad) return bad;
  }
  return out;
}

/** ISO 8601, or a Unix time in seconds (fractions allowed) or milliseconds. */
function parseTime(v: unknown): number | undefined {
  const num = typeof v === 'number' ? v : /^\d+(\.\d+)?$/.test(String(v)) ? Number(v) : NaN;
  if (Number.isFinite(num)) return num > 1e11 ? num : num * 1000;
  const ms = Date.parse(String(v));
  return Number.isNaN(ms) ? undefined : ms;
}

/** Bad lines of a log: the first few by number and reason, then only a count. */
export class BadLines {
  readonly kept: { line: number; reason: string }[] = [];
  count = 0;
  constructor(private readonly keep = 10) {}

  add(line: number, reason: string): void {
    this.count++;
    if (this.kept.length < this.keep) this.kept.push({ line, reason });
  }

  /** `traffic.jsonl: 3 bad lines: line 2: not valid JSON; line 5: …; and 1 more`. */
  summary(file: string): string {
    const listed = this.kept.map((b) => `line ${b.line}: ${b.reason}`).join('; ');
    const more = this.count > this.kept.length ? `; and ${this.count - this.kept.length} more` : '';
    return `${file}: ${this.count} bad line${this.count === 1 ? '' : 's'}: ${listed}${more}`;
  }
}
