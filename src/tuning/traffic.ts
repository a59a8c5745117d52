import { createReadStream } from 'node:fs';
import { createInterface } from 'node:readline';

/** One request of a traffic log, as the simulator needs it. */
export interface TrafficLine {
  timeMs: number;
  method: string;
  path: string;
  /** The Authorization header, when the log has it. */
  authorization?: string;
  /** The token's fingerprint, when the log has only that (as Tollgate's own tools print it). */
  fingerprint?: string;
}

export class TrafficError extends Error {
  override readonly name = 'TrafficError';
}

/** Field names accepted for each column, in JSON lines or a CSV header: ours, and those of Envoy's JSON access
 * logs (`start_time`, `method`, `path`, `x-envoy-original-path`, `authorization`). */
const ALIASES: Record<keyof TrafficLine, string[]> = {
  timeMs: ['timestamp', 'time', 'start_time', '@timestamp', 'ts'],
  method: ['method', ':method', 'request_method'],
  path: ['path', 'x-envoy-original-path', ':path', 'request_path', 'url'],
  authorization: ['authorization', 'token', 'req_authorization'],
  fingerprint: ['fingerprint', 'token_fingerprint'],
};

/** Reads JSON lines or CSV (with a header row), one request per line. Errors name the line. `onProgress`
 * hears the bytes read so far every 50,000 lines. */
export async function* readTraffic(file: string, onProgress?: (bytesRead: number) => void): AsyncGenerator<TrafficLine> {
  const input = createReadStream(file, 'utf8');
  const lines = createInterface({ input, crlfDelay: Infinity });
  let header: string[] | undefined;
  let n = 0;
  for await (const raw of lines) {
    n++;
    if (onProgress && n % 50_000 === 0) onProgress(input.bytesRead);
    const line = raw.trim();
    if (!line) continue;
    if (header === undefined && !line.startsWith('{')) {
      header = line.split(',').map((h) => h.trim().toLowerCase());
      continue;
    }
    const record = header ? fromCsv(header, line) : fromJson(line, file, n);
    yield toLine(record, file, n);
  }
}

function fromJson(line: string, file: string, n: number): Record<string, unknown> {
  try {
    return JSON.parse(line) as Record<string, unknown>;
  } catch {
    throw new TrafficError(`${file}:${n}: not valid JSON`);
  }
}

/** Plain CSV: no quoted commas (paths, methods, timestamps and tokens have none). */
function fromCsv(header: string[], line: string): Record<string, unknown> {
  const cells = line.split(',');
  return Object.fromEntries(header.map((h, i) => [h, cells[i]?.trim() ?? '']));
}

function pick(record: Record<string, unknown>, field: keyof TrafficLine): unknown {
  for (const name of ALIASES[field]) {
    const v = record[name];
    if (v !== undefined && v !== null && v !== '' && v !== '-') return v;
  }
  return undefined;
}

function toLine(record: Record<string, unknown>, file: string, n: number): TrafficLine {
  const time = pick(record, 'timeMs');
  const method = pick(record, 'method');
  const path = pick(record, 'path');
  if (time === undefined || method === undefined || path === undefined) {
    throw new TrafficError(`${file}:${n}: needs a timestamp, a method and a path (fields: ${ALIASES.timeMs[0]}, method, path)`);
  }
  const out: TrafficLine = { timeMs: parseTime(time, file, n), method: String(method).toUpperCase(), path: String(path) };
  const auth = pick(record, 'authorization');
  const fp = pick(record, 'fingerprint');
  if (auth !== undefined) out.authorization = String(auth);
  else if (fp !== undefined) out.fingerprint = String(fp).toLowerCase();
  return out;
}

/** ISO 8601, or a Unix time in seconds (fractions allowed) or milliseconds. */
function parseTime(v: unknown, file: string, n: number): number {
  const num = typeof v === 'number' ? v : /^\d+(\.\d+)?$/.test(String(v)) ? Number(v) : NaN;
  if (Number.isFinite(num)) return num > 1e11 ? num : num * 1000;
  const ms = Date.parse(String(v));
  if (Number.isNaN(ms)) throw new TrafficError(`${file}:${n}: cannot read the time "${String(v)}"`);
  return ms;
}
