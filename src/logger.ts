import { pino, type Logger } from 'pino';

/** JSON logs on stdout, one line per state change. Fields that could carry a secret are redacted as a
 * second line of defence: code logs fingerprints, never tokens. */
export function createLogger(level: string): Logger {
  return pino({
    level,
    base: { service: 'tollgate' },
    redact: { paths: ['token', '*.token', 'authorization', '*.authorization', 'value', '*.value'], censor: '[redacted]' },
  });
}
