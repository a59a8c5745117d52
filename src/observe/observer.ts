import type { IncomingHttpHeaders } from 'node:http';
import { status as GrpcStatus, type Metadata } from '@grpc/grpc-js';
import { type Context, isSpanContextValid, type Span, trace } from '@opentelemetry/api';
import type { Decision, DecisionInput } from '../limiter/limiter.js';
import { httpStatusOf, statusCodeOf } from '../response/error-status.js';
import { summarize } from '../response/summary.js';
import type { TraceLink } from '../store/store.js';
import { callerContext } from '../tracing/propagation.js';
import type { CallKind, Tracing } from '../tracing/tracing.js';
import type { DecisionLog } from './decision-log.js';

/** Where a decision came from: the protocol, and the headers that may carry the caller's trace. */
export interface CallInfo {
  kind: CallKind;
  headers: Metadata | IncomingHttpHeaders | undefined;
}

/** One decision being observed: the span (when tracing), and what to do once it is decided or failed. */
export interface ObservedCall {
  /** For the store's batch span: set only when this decision is sampled. */
  readonly link: TraceLink | undefined;
  decided(input: DecisionInput, decision: Decision): void;
  failed(err: unknown): void;
}

/** Tracing and the decision log around each decision. Built by the service only when one of them is on, so
 * a decision without either takes none of this path (rls/ratelimit-handler.ts). */
export class DecisionObserver {
  constructor(
    private readonly tracing: Tracing | undefined,
    private readonly log: DecisionLog | undefined,
  ) {}

  /** The caller's headers are read here once when tracing (the span's parent and the log line's trace id);
   * with the log alone, only for a line that is written. */
  begin(call: CallInfo): ObservedCall {
    const parent = this.tracing ? callerContext(call.headers) : undefined;
    const span = parent && this.tracing!.startDecision(call.kind, parent);
    return new Observed(this.tracing, this.log, call.kind, span, call.headers, parent);
  }
}

class Observed implements ObservedCall {
  readonly link: TraceLink | undefined;

  constructor(
    private readonly tracing: Tracing | undefined,
    private readonly log: DecisionLog | undefined,
    private readonly kind: CallKind,
    private readonly span: Span | undefined,
    private readonly headers: CallInfo['headers'],
    private readonly parent: Context | undefined,
  ) {
    this.link = span && tracing!.linkOf(span);
  }

  /** The summary is made only for a recorded span or a line the log will write: at a 1% sampling rate,
   * most decisions end an unrecorded span and nothing more. */
  decided(input: DecisionInput, decision: Decision): void {
    const recording = this.span?.isRecording() ?? false;
    const logged = this.log?.wants(decision.overLimit && !decision.streamEnd) ?? false;
    const summary = recording || logged ? summarize(input, decision) : undefined;
    if (this.span) {
      if (summary && recording) this.tracing!.endDecision(this.span, this.kind, summary);
      else this.span.end();
    }
    if (summary && logged) this.log!.decided(summary, this.traceId());
  }

  failed(err: unknown): void {
    const grpcCode = statusCodeOf(err);
    const status = GrpcStatus[grpcCode] ?? 'UNKNOWN';
    // The class, not `name`: StoreDegradedError and its siblings inherit StoreUnavailableError's name.
    const errorClass = err instanceof Error ? err.constructor.name : 'unknown';
    if (this.span) this.tracing!.failDecision(this.span, this.kind, { grpcCode, httpStatus: httpStatusOf(grpcCode), status, errorClass });
    this.log?.failed(status, errorClass, this.traceId());
  }

  /** The trace this decision is recorded in (its span's, when sampled), else the one the caller sent: never
   * the id of an unsampled trace that started here, which no tracing backend would find. */
  private traceId(): string | undefined {
    const ctx = this.span?.isRecording() ? this.span.spanContext() : trace.getSpanContext(this.parent ?? callerContext(this.headers));
    return ctx && isSpanContextValid(ctx) ? ctx.traceId : undefined;
  }
}
