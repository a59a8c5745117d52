import type { Logger } from 'pino';
import type { AssignmentSummary } from '../response/assignment-summary.js';
import type { DecisionSummary } from '../response/summary.js';

/** off: no line. over: a line per rejected request (429). all: a line per decision, failures included. */
export const DECISION_LOG_MODES = ['off', 'over', 'all'] as const;
export type DecisionLogMode = (typeof DECISION_LOG_MODES)[number];

export interface DecisionLogOptions {
  mode: Exclude<DecisionLogMode, 'off'>;
  /** Most lines a second; past it lines are dropped, counted, and reported in one line a second. */
  maxPerSecond: number;
  /** Lines dropped by the bound (tollgate_decision_log_dropped_total). */
  onDropped?: (n: number) => void;
  /** Milliseconds, for the per-second bound; tests set it. */
  now?: () => number;
}

/** The line a support engineer finds when a client asks why it got a 429: one JSON line per decision (msg
 * "decision", log "decision") with the trace id, domain, client fingerprint, the rule and limit that blocked
 * (or the tightest one), what was left, when to retry, and the answer. Written whatever LOG_LEVEL says: it is
 * asked for by DECISION_LOG on its own. No request value is written: the client is its fingerprint (tollgate
 * fingerprint TOKEN prints the same one). `tollgate explain --log` reads these lines back. */
export class DecisionLog {
  private readonly out: Logger;
  private readonly now: () => number;
  private second = 0;
  private written = 0;
  private dropped = 0;

  constructor(
    logger: Logger,
    private readonly opts: DecisionLogOptions,
  ) {
    this.out = logger.child({ log: 'decision' }, { level: 'info' });
    this.now = opts.now ?? Date.now;
  }

  /** Whether a decision of this answer gets a line (before the per-second bound). */
  wants(overLimit: boolean): boolean {
    return this.opts.mode === 'all' || overLimit;
  }

  /** A decision made: logged in `all` mode, and in `over` mode when the request was rejected. */
  decided(s: DecisionSummary, traceId: string | undefined): void {
    if (this.opts.mode === 'over' && s.code !== 'OVER_LIMIT') return;
    if (!this.admit()) return;
    const binding = s.blocking ?? s.tightest;
    this.out.info(
      {
        trace_id: traceId,
        domain: s.domain ?? null,
        client: s.client ?? null,
        code: s.code,
        rule: binding?.rule ?? null,
        limit: binding?.limit ?? null,
        remaining: s.remaining ?? null,
        retry_after_ms: s.code === 'OVER_LIMIT' ? s.retryAfterMs : undefined,
        source: s.source,
        descriptors: s.descriptors.map((d) => ({
          rule: d.rule ?? null,
          code: d.code,
          limit: d.limit ?? null,
          remaining: d.remaining ?? null,
          tier: d.tier ?? null,
          ...(d.shadow && { shadow: true }),
          ...(d.op && { op: d.op }),
          ...(d.charged !== undefined && { charged: d.charged }),
          ...(d.debt !== undefined && { debt: d.debt }),
          ...(d.reservation && { reservation: d.reservation }),
          ...(d.refunded !== undefined && { refunded: d.refunded }),
          ...(d.refundIgnored && { refund_ignored: true }),
          ...(d.slots && { slots: d.slots }),
        })),
      },
      'decision',
    );
  }

  /** A decision that could not be made (`all` mode): the status answered and the error's class. */
  failed(status: string, errorClass: string, traceId: string | undefined): void {
    if (this.opts.mode !== 'all' || !this.admit()) return;
    this.out.info({ trace_id: traceId, code: status, error: errorClass }, 'decision');
  }

  /** An answered RLQS report (docs/rlqs.md): logged in `all` mode, and in `over` mode when it refused a bucket
   * outright (DENY_ALL) or could not be answered. */
  assigned(s: AssignmentSummary): void {
    if (this.opts.mode === 'over' && s.strategies.deny_all === 0 && !s.failure) return;
    if (!this.admit()) return;
    const { domain, instance, buckets, allowed, denied, strategies, denyRules, failure } = s;
    this.out.info({ domain: domain ?? null, instance, buckets, allowed, denied, strategies, deny_rules: denyRules, error: failure }, 'rlqs assignment');
  }

  /** The per-second bound; on the first line of a new second, one line about the last second's drops. */
  private admit(): boolean {
    const second = Math.floor(this.now() / 1000);
    if (second !== this.second) {
      if (this.dropped > 0)
        this.out.warn(
          { dropped: this.dropped, maxPerSecond: this.opts.maxPerSecond },
          `decision log: ${this.dropped} lines dropped in one second (DECISION_LOG_MAX_PER_SECOND)`,
        );
      this.second = second;
      this.written = 0;
      this.dropped = 0;
    }
    if (this.written < this.opts.maxPerSecond) {
      this.written++;
      return true;
    }
    this.dropped++;
    this.opts.onDropped?.(1);
    return false;
  }
}
