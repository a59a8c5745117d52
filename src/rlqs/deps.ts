import type { status } from '@grpc/grpc-js';
import type { Logger } from 'pino';
import type { RlqsMetrics, RlqsStreamError } from '../metrics/rlqs-metrics.js';
import type { AssignmentSummary } from '../response/assignment-summary.js';
import type { RlqsBoundSettings, RlqsBounds } from './bounds.js';
import type { AnswerSlots, CpuShare } from './cpu.js';
import type { InstanceRegistry } from './identity.js';
import type { RareLines } from './log.js';
import type { WireQuotaResponse } from './messages.js';
import type { QuotaService } from './quota/quota-service.js';
import type { StreamLimits } from './stream-buckets.js';
import type { UnansweredReports } from './unanswered.js';

/** What the RLQS service is given (wiring.ts), what all its streams share (service.ts), and what a stream's
 * session asks of its transport (session.ts, stream.ts). */

export interface RlqsDeps {
  quota: QuotaService;
  instances: InstanceRegistry;
  limits: StreamLimits;
  /** What all streams together may hold and spend (bounds.ts, cpu.ts); defaults when left out. */
  process?: RlqsProcessLimits;
  logger: Logger;
  metrics?: RlqsMetrics;
  /** The domain's name as a metric label: configured domains only. */
  domainLabel: (domain: string) => string;
  /** Called with what each report was answered with (decision log, traces), and when it began. */
  onAssigned?: (a: AssignmentSummary, startMs: number) => void;
}

export interface RlqsProcessLimits extends RlqsBoundSettings {
  /** The share of the process's time RLQS work may take (RLQS_CPU_SHARE). */
  cpuShare: number;
}

/** What domainLabel() answers for a domain no config names. */
export const UNKNOWN_DOMAIN = '(unknown)';

/** What every stream shares: the deps, the count of reports the store left unanswered, the log lines a client
 * can cause (one a minute each), the bounds, RLQS's share of the process, and the bytes of reports waiting. */
export type StreamDeps = RlqsDeps & {
  unanswered: UnansweredReports;
  lines: RareLines;
  bounds: RlqsBounds;
  cpu: CpuShare;
  slots: AnswerSlots;
  pending: { bytes: number };
};

/** What a session needs of its stream's transport. */
export interface StreamOutlet {
  /** The client's address, as gRPC names it. */
  readonly peer: string;
  /** The operator's name for the Envoy (identity.ts INSTANCE_HEADER), if the stream carries one. */
  readonly instanceName: string | undefined;
  /** The reports read and not yet answered, handed over (a stream held back is read again, or ended if it was
   * held back too many answers in a row). */
  take(): Buffer[];
  /** Ending (the client is done, or the replica drains): what waits is answered without waiting out the gap. */
  readonly ending: boolean;
  /** Answer messages written and not yet read by the client. */
  unread(): number;
  write(message: WireQuotaResponse): void;
  /** Ends the stream with a status after the answers already written, counted and logged by reason. */
  fail(reason: RlqsStreamError, code: status, details: string): void;
}
