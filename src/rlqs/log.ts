import type { Logger } from 'pino';

/** How often a line of one kind may be written. */
const LOG_EVERY_MS = 60_000;

/** Log lines of RLQS events that a client can cause at will (a refused stream, a report not answered): at most
 * one line a minute per kind for the whole process, saying how many happened since the last line, so a client
 * that opens 10,000 refused streams a second writes one line a minute, not 10,000 a second. Every event is still
 * counted by its metric; the fields passed name no request text (a reason, a fingerprint, a bound). */
export class RareLines {
  private readonly kinds = new Map<string, { since: number; loggedAtMs: number }>();

  constructor(
    private readonly logger: Pick<Logger, 'info' | 'warn'>,
    private readonly now: () => number = Date.now,
  ) {}

  /** One event of `kind`; written, with how many since the last line as `countAs`, if none was this minute. */
  note(level: 'info' | 'warn', kind: string, fields: Record<string, unknown>, msg: string, countAs = 'events'): void {
    const k = this.kinds.get(kind) ?? { since: 0, loggedAtMs: -Infinity };
    this.kinds.set(kind, k);
    k.since++;
    const now = this.now();
    if (now - k.loggedAtMs < LOG_EVERY_MS) return;
    this.logger[level]({ ...fields, [countAs]: k.since }, `${msg} (logged at most once a minute, with how many since the last line)`);
    k.loggedAtMs = now;
    k.since = 0;
  }
}
