import type { StoreUnavailableError } from '../errors.js';
import type { RlqsMetrics } from '../metrics/rlqs-metrics.js';
import type { RareLines } from './log.js';

/** RLQS reports left unanswered, in whole or in part, because the store could not answer: each one counted
 * (`tollgate_rlqs_stream_errors_total{reason="store_unavailable"}`, which TollgateRlqsReportsUnanswered watches),
 * whatever the windows of its buckets, and logged at most once a minute for the whole process with how many
 * since the last line, so an outage under 10,000 streams is one line a minute. */
export class UnansweredReports {
  constructor(
    private readonly lines: RareLines,
    private readonly metrics: RlqsMetrics | undefined,
  ) {}

  /** A report of `instance` (a fingerprint) not answered for `err` (whose message names no request text). */
  report(err: StoreUnavailableError, instance: string): void {
    this.metrics?.streamErrors.inc({ reason: 'store_unavailable' });
    this.lines.note(
      'warn',
      'unanswered',
      { err: err.message, instance },
      'rlqs reports not assigned: the store did not answer (Envoy keeps its assignments until their TTL)',
      'reports',
    );
  }
}
