import type { Logger } from 'pino';
import type { StoreUnavailableError } from '../errors.js';
import type { RlqsMetrics } from '../metrics/rlqs-metrics.js';

/** How often a line says reports are going unanswered. */
const LOG_EVERY_MS = 60_000;

/** RLQS reports left unanswered, in whole or in part, because the store could not answer: each one counted
 * (`tollgate_rlqs_stream_errors_total{reason="store_unavailable"}`, which TollgateRlqsReportsUnanswered watches),
 * whatever the windows of its buckets, and logged at most once a minute for the whole process with how many
 * since the last line, so an outage under 10,000 streams is one line a minute. */
export class UnansweredReports {
  private since = 0;
  private loggedAtMs = -Infinity;

  constructor(
    private readonly logger: Pick<Logger, 'warn'>,
    private readonly metrics: RlqsMetrics | undefined,
    private readonly now: () => number = Date.now,
  ) {}

  /** A report of `instance` (a fingerprint) not answered for `err` (whose message names no request text). */
  report(err: StoreUnavailableError, instance: string): void {
    this.metrics?.streamErrors.inc({ reason: 'store_unavailable' });
    this.since++;
    const now = this.now();
    if (now - this.loggedAtMs < LOG_EVERY_MS) return;
    this.logger.warn(
      { err: err.message, instance, reports: this.since },
      'rlqs reports not assigned: the store did not answer (Envoy keeps its assignments until their TTL; logged at most once a minute)',
    );
    this.loggedAtMs = now;
    this.since = 0;
  }
}
