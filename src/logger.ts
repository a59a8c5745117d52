import { type DestinationStream, type Logger, pino } from 'pino';
import { LogSink } from './log-sink.js';

export type LogFormat = 'json' | 'text';

/** Logs on stdout, one line per state change: JSON lines, or (LOG_FORMAT=text, as envoyproxy/ratelimit
 * offers) the same events as readable lines. Fields that could carry a secret are redacted as a second line
 * of defence: code logs fingerprints, never tokens. Redaction happens before either format is written. */
export function createLogger(level: string, format: LogFormat = 'json', sink: LogSink = new LogSink()): Logger {
  const options = {
    level,
    base: { service: 'tollgate' },
    // "level":"info", as log pipelines (and envoyproxy/ratelimit's logrus) write it, not pino's number.
    formatters: { level: (label: string) => ({ level: label }) },
    redact: { paths: ['token', '*.token', 'authorization', '*.authorization', 'value', '*.value'], censor: '[redacted]' },
  };
  // Through the sink, which never blocks the process or its exit (src/log-sink.ts), in either format.
  return format === 'text' ? pino(options, textDestination(sink)) : pino(options, sink);
}

const LEVEL_NAMES: Record<number, string> = { 10: 'TRACE', 20: 'DEBUG', 30: 'INFO', 40: 'WARN', 50: 'ERROR', 60: 'FATAL' };
const OWN_FIELDS = new Set(['level', 'time', 'msg', 'pid', 'hostname', 'service']);

/** `2026-11-21T10:00:00.000Z INFO tollgate serving grpcPort=8081 store=memory`: pino's line, reformatted. */
export function textLine(json: string): string {
  const o = JSON.parse(json) as Record<string, unknown>;
  const fields = Object.entries(o)
    .filter(([k]) => !OWN_FIELDS.has(k))
    .map(([k, v]) => `${k}=${typeof v === 'string' && !/\s/.test(v) ? v : JSON.stringify(v)}`);
  const time = typeof o.time === 'number' ? new Date(o.time).toISOString() : '';
  const level = typeof o.level === 'number' ? LEVEL_NAMES[o.level] : String(o.level ?? '').toUpperCase();
  return `${[time, level ?? String(o.level), String(o.msg ?? ''), ...fields].filter(Boolean).join(' ')}\n`;
}

function textDestination(out: DestinationStream): DestinationStream {
  return { write: (line: string) => out.write(textLine(line)) };
}
