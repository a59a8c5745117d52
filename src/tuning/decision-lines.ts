import { createReadStream } from 'node:fs';
import { createInterface } from 'node:readline';
import { asFingerprint, fingerprint } from '../fingerprint.js';

/** `tollgate explain --log FILE`: from a 429 a client reports to the decision log lines (DECISION_LOG) that
 * answered it. The client is named by its token (hashed here, as the service hashes it) or by the
 * fingerprint `tollgate fingerprint` printed; a trace id narrows it to one call. */

export interface DecisionLine {
  time: number;
  trace_id?: string;
  domain: string | null;
  client: string | null;
  code: string;
  rule: string | null;
  limit: string | null;
  remaining: number | null;
  retry_after_ms?: number;
  source?: string;
  error?: string;
}

export interface LineFilter {
  /** A fingerprint (32 or 64 hex characters) or a token. */
  client?: string;
  traceId?: string;
  overOnly: boolean;
}

/** A log line longer than this is not a decision line (those are bounded by MAX_DESCRIPTORS): skipped
 * unparsed, so a 50 MB line costs no JSON parse. */
const MAX_LINE_CHARS = 256 * 1024;

export interface Found {
  /** The last `last` matching lines, oldest first. */
  lines: DecisionLine[];
  matched: number;
  /** Decision lines read, matching or not, and lines that were not decision lines. */
  decisions: number;
  other: number;
}

export async function findDecisions(file: string, filter: LineFilter, last: number): Promise<Found> {
  const client = filter.client === undefined ? undefined : (asFingerprint(filter.client) ?? fingerprint(filter.client));
  const traceId = filter.traceId?.toLowerCase();
  const out: Found = { lines: [], matched: 0, decisions: 0, other: 0 };
  const input = createInterface({ input: createReadStream(file, { encoding: 'utf8' }), crlfDelay: Infinity });
  for await (const text of input) {
    const line = text.length <= MAX_LINE_CHARS && text.startsWith('{') ? parse(text) : undefined;
    if (!line) {
      out.other++;
      continue;
    }
    out.decisions++;
    if (client !== undefined && line.client !== client) continue;
    if (traceId !== undefined && line.trace_id !== traceId) continue;
    if (filter.overOnly && line.code !== 'OVER_LIMIT') continue;
    out.matched++;
    out.lines.push(line);
    if (out.lines.length > last) out.lines.shift();
  }
  return out;
}

function parse(text: string): DecisionLine | undefined {
  try {
    const o = JSON.parse(text) as Record<string, unknown>;
    return o.log === 'decision' && o.msg === 'decision' && typeof o.code === 'string' ? (o as unknown as DecisionLine) : undefined;
  } catch {
    return undefined;
  }
}

/** One readable line per decision. */
export function formatDecision(l: DecisionLine): string {
  const parts = [new Date(l.time).toISOString(), l.code.padEnd(10), l.domain ?? '(unknown domain)'];
  if (l.client) parts.push(`client ${l.client}`);
  if (l.rule) parts.push(`rule ${l.rule}`);
  if (l.limit) parts.push(`limit ${l.limit}`);
  if (l.remaining !== null && l.remaining !== undefined) parts.push(`remaining ${l.remaining}`);
  if (l.retry_after_ms !== undefined) parts.push(`retry in ${(l.retry_after_ms / 1000).toFixed(1)} s`);
  if (l.source && l.source !== 'store') parts.push(`answered by ${l.source}`);
  if (l.error) parts.push(`error ${l.error}`);
  if (l.trace_id) parts.push(`trace ${l.trace_id}`);
  return parts.join('  ');
}
