import { Counter, Gauge, type Registry } from 'prom-client';

/** The Rate Limit Quota Service's series (docs/rlqs.md). Labels name configured domains only (an unknown one is
 * "(unknown)"), kinds of strategy and reasons: never a bucket id, instance or other request text. */

/** Why a bucket got no share, and why a stream was ended or a report not answered. */
const RLQS_REFUSALS = ['too_many_buckets', 'empty_bucket_id', 'bad_bucket_id', 'idle'] as const;
const RLQS_STREAM_ERRORS = [
  'no_domain',
  'bad_domain',
  'bad_instance',
  'domain_changed',
  'undecodable',
  'too_many_streams',
  'not_reading',
  'too_many_reports',
  'store_unavailable',
  'internal',
  'silent',
] as const;
export type RlqsStreamError = (typeof RLQS_STREAM_ERRORS)[number];

export class RlqsMetrics {
  /** How many streams are open and buckets held, read at each scrape from the streams themselves. */
  private open: () => { streams: number; buckets: number } = () => ({ streams: 0, buckets: 0 });
  readonly assignments: Counter<'domain' | 'strategy'>;
  readonly reported: Counter<'domain' | 'result'>;
  readonly refused: Counter<'reason'>;
  readonly streamErrors: Counter<'reason'>;

  constructor(registry: Registry) {
    const registers = [registry];
    new Gauge({
      name: 'tollgate_rlqs_streams',
      help: 'Open RLQS streams (one per Envoy instance and domain)',
      registers,
      collect: this.set(() => this.open().streams),
    });
    new Gauge({ name: 'tollgate_rlqs_buckets', help: 'RLQS buckets held by the open streams', registers, collect: this.set(() => this.open().buckets) });
    this.assignments = new Counter({
      name: 'tollgate_rlqs_assignments_total',
      help: 'Bucket actions sent to Envoy, by domain and strategy (token_bucket, allow_all, deny_all, abandon); re-sent ones included',
      labelNames: ['domain', 'strategy'],
      registers,
    });
    this.reported = new Counter({
      name: 'tollgate_rlqs_reported_requests_total',
      help: "Requests Envoy's rate_limit_quota filter reported deciding locally, by domain and result (allowed, denied)",
      labelNames: ['domain', 'result'],
      registers,
    });
    this.refused = new Counter({
      name: 'tollgate_rlqs_buckets_refused_total',
      help:
        'Reported buckets given no share, by reason: too_many_buckets (past the stream bound: ALLOW_ALL if in use, else abandoned), empty_bucket_id, ' +
        'bad_bucket_id, idle (abandoned)',
      labelNames: ['reason'],
      registers,
    });
    this.streamErrors = new Counter({
      name: 'tollgate_rlqs_stream_errors_total',
      help: 'RLQS streams ended, or reports not answered, by reason',
      labelNames: ['reason'],
      registers,
    });
    for (const reason of RLQS_REFUSALS) this.refused.inc({ reason }, 0);
    for (const reason of RLQS_STREAM_ERRORS) this.streamErrors.inc({ reason }, 0);
  }

  private set(read: () => number): (this: Gauge) => void {
    return function (this: Gauge) {
      this.set(read());
    };
  }

  /** Where the gauges read the open streams and their buckets from (the stream handler's own set). */
  measure(open: () => { streams: number; buckets: number }): void {
    this.open = open;
  }
}
