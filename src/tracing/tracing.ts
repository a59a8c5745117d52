import { randomUUID } from 'node:crypto';
import {
  type Attributes,
  type Context,
  isSpanContextValid,
  type Link,
  ROOT_CONTEXT,
  type Span,
  type SpanContext,
  SpanKind,
  SpanStatusCode,
  type Tracer,
  trace,
} from '@opentelemetry/api';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { AlwaysOnSampler, ParentBasedSampler, TracerProvider } from '@opentelemetry/sdk-trace';
import type { AssignmentSummary } from '../response/assignment-summary.js';
import type { DecisionSummary } from '../response/summary.js';
import type { BatchSpan, BatchTracer, TraceLink } from '../store/store.js';
import { BoundedSpanProcessor, type ExportProtocol, otlpExporter, type QueueOptions, type SpanOutcome } from './export.js';

export interface TracingOptions {
  protocol: ExportProtocol;
  serviceName: string;
  serviceNamespace: string;
  /** Empty: a random UUID per process, as envoyproxy/ratelimit does (src/trace/trace.go). */
  serviceInstanceId: string;
  /** Of traces Tollgate starts; a caller's sampled (or not) trace is followed whatever the rate. */
  samplingRate: number;
  queue: QueueOptions;
  version: string;
}

/** The calls a decision span is opened for: Envoy's gRPC call, or POST /json. */
export type CallKind = 'grpc' | 'json';

const RLS_SERVICE = 'envoy.service.ratelimit.v3.RateLimitService';
const RLQS_SERVICE = 'envoy.service.rate_limit_quota.v3.RateLimitQuotaService';
const SPAN_NAMES: Record<CallKind, string> = { grpc: `${RLS_SERVICE}/ShouldRateLimit`, json: 'POST /json' };
const START_ATTRIBUTES: Record<CallKind, Attributes> = {
  grpc: { 'rpc.system': 'grpc', 'rpc.service': RLS_SERVICE, 'rpc.method': 'ShouldRateLimit' },
  json: { 'http.request.method': 'POST', 'url.path': '/json' },
};

/** OpenTelemetry tracing of decisions: one server span per decision, a child of the caller's trace when it
 * sent one (W3C or B3); one span per Redis script call, linked to the sampled decisions it carried. Sampling
 * is envoyproxy/ratelimit's: parent-based, with a trace-id ratio for traces that start here. */
export class Tracing implements BatchTracer {
  private readonly tracer: Tracer;

  private constructor(
    private readonly provider: TracerProvider,
    private readonly processor: BoundedSpanProcessor,
    private readonly storeKind: string,
    private readonly rootRate: number,
  ) {
    this.tracer = provider.getTracer('tollgate');
  }

  static async create(opts: TracingOptions, storeKind: string, outcome: (o: SpanOutcome, n: number, err?: Error) => void): Promise<Tracing> {
    const processor = new BoundedSpanProcessor(await otlpExporter(opts.protocol), opts.queue, outcome);
    const provider = new TracerProvider({
      // Roots are sampled at the rate before a span is made (startDecision): whatever reaches the SDK
      // without a parent is already chosen.
      sampler: new ParentBasedSampler({ root: new AlwaysOnSampler() }),
      spanProcessors: [processor],
      resource: resourceFromAttributes({
        'service.name': opts.serviceName,
        ...(opts.serviceNamespace && { 'service.namespace': opts.serviceNamespace }),
        'service.instance.id': opts.serviceInstanceId || randomUUID(),
        'service.version': opts.version,
      }),
    });
    return new Tracing(provider, processor, storeKind, opts.samplingRate);
  }

  /** A decision's span, started under the caller's trace context; none for a trace that would start here
   * and is not sampled. That is envoyproxy/ratelimit's ParentBased(TraceIDRatioBased(rate)), with the ratio
   * drawn before the SDK makes ids and an unrecorded span: at 1%, 99 of 100 untraced calls cost reading their
   * headers (`parent`, propagation.ts) and one random number. A caller's trace, sampled or not, goes to the SDK's parent-based sampler. */
  startDecision(kind: CallKind, parent: Context): Span | undefined {
    const remote = trace.getSpanContext(parent);
    if (!(remote && isSpanContextValid(remote)) && !(Math.random() < this.rootRate)) return undefined;
    return this.tracer.startSpan(SPAN_NAMES[kind], { kind: SpanKind.SERVER, attributes: START_ATTRIBUTES[kind] }, parent);
  }

  /** What the store links its batch span to: the span's context, for a sampled decision only. */
  linkOf(span: Span): TraceLink | undefined {
    return span.isRecording() ? span.spanContext() : undefined;
  }

  endDecision(span: Span, kind: CallKind, summary: DecisionSummary): void {
    if (span.isRecording()) {
      span.setAttributes(decisionAttributes(summary, this.storeKind));
      span.setAttribute(...statusAttribute(kind, 0, summary.code === 'OVER_LIMIT' ? 429 : 200));
    }
    span.end();
  }

  /** A decision that failed: the status it was answered with and the error's class, never its text. */
  failDecision(span: Span, kind: CallKind, failure: { grpcCode: number; httpStatus: number; status: string; errorClass: string }): void {
    if (span.isRecording()) {
      span.setAttributes({ 'error.type': failure.errorClass, 'tollgate.store': this.storeKind });
      span.setAttribute(...statusAttribute(kind, failure.grpcCode, failure.httpStatus));
      span.setStatus({ code: SpanStatusCode.ERROR, message: failure.status });
    }
    span.end();
  }

  /** One answered RLQS report: a root span (a stream lives for hours, so no caller's trace is its parent),
   * sampled at the rate of traces that start here. */
  assigned(s: AssignmentSummary, startMs: number): void {
    if (!(Math.random() < this.rootRate)) return;
    const span = this.tracer.startSpan(
      `${RLQS_SERVICE}/StreamRateLimitQuotas report`,
      { kind: SpanKind.SERVER, startTime: startMs, attributes: { 'rpc.system': 'grpc', 'rpc.service': RLQS_SERVICE, 'rpc.method': 'StreamRateLimitQuotas' } },
      ROOT_CONTEXT,
    );
    span.setAttributes({
      'tollgate.domain.known': s.domain !== undefined,
      ...(s.domain !== undefined && { 'tollgate.domain': s.domain }),
      'tollgate.store': this.storeKind,
      'tollgate.rlqs.instance': s.instance,
      'tollgate.rlqs.buckets': s.buckets,
      'tollgate.rlqs.allowed': s.allowed,
      'tollgate.rlqs.denied': s.denied,
      'tollgate.rlqs.token_bucket': s.strategies.token_bucket,
      'tollgate.rlqs.allow_all': s.strategies.allow_all,
      'tollgate.rlqs.deny_all': s.strategies.deny_all,
      'tollgate.rlqs.abandon': s.strategies.abandon,
      'tollgate.rlqs.deny_rules': s.denyRules,
    });
    if (s.failure) {
      span.setAttribute('error.type', s.failure);
      span.setStatus({ code: SpanStatusCode.ERROR, message: 'store unavailable' });
    }
    span.end();
  }

  start(links: readonly TraceLink[], size: { requests: number; keys: number }): BatchSpan {
    const spanLinks: Link[] = links.map((l) => ({ context: l as SpanContext }));
    // The first decision is its parent, so the span is sampled with it and shows in its trace; the others
    // reach it through their links.
    const parent = trace.setSpanContext(ROOT_CONTEXT, links[0] as SpanContext);
    const span = this.tracer.startSpan(
      'redis check-and-incr',
      {
        kind: SpanKind.CLIENT,
        links: spanLinks,
        attributes: { 'db.system.name': 'redis', 'db.operation.name': 'EVALSHA', 'tollgate.batch.requests': size.requests, 'tollgate.batch.keys': size.keys },
      },
      parent,
    );
    return {
      end: (failure) => {
        if (failure) span.setStatus({ code: SpanStatusCode.ERROR, message: failure });
        span.end();
      },
    };
  }

  /** Spans held for export now (queued or being sent). */
  get queued(): number {
    return this.processor.size;
  }

  /** Sends what is queued, for at most `timeoutMs`; spans still unsent then are lost. */
  async shutdown(timeoutMs: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutMs).unref()));
    await Promise.race([this.provider.shutdown().catch(() => undefined), late]);
    clearTimeout(timer);
  }
}

/** The call's answer in the attribute its protocol's conventions name. */
function statusAttribute(kind: CallKind, grpcCode: number, httpStatus: number): [string, number] {
  return kind === 'grpc' ? ['rpc.grpc.status_code', grpcCode] : ['http.response.status_code', httpStatus];
}

/** A decision's attributes (docs/tracing.md): what the config names and the client's fingerprint, never a
 * request value. Per descriptor, parallel arrays in request order ('' or -1 where there is nothing). */
export function decisionAttributes(s: DecisionSummary, storeKind: string): Attributes {
  const a: Attributes = {
    'tollgate.code': s.code,
    'tollgate.source': s.source,
    'tollgate.store': storeKind,
    'tollgate.over_limit_cache': s.source === 'cache',
    'tollgate.retry_after_ms': s.retryAfterMs,
    'tollgate.descriptors.count': s.descriptors.length,
    'tollgate.descriptors.rule': s.descriptors.map((d) => d.rule ?? ''),
    'tollgate.descriptors.code': s.descriptors.map((d) => d.code),
    'tollgate.descriptors.limit': s.descriptors.map((d) => d.limit ?? ''),
    'tollgate.descriptors.tier': s.descriptors.map((d) => d.tier ?? ''),
    'tollgate.descriptors.remaining': s.descriptors.map((d) => d.remaining ?? -1),
  };
  a['tollgate.domain.known'] = s.domain !== undefined;
  if (s.domain !== undefined) a['tollgate.domain'] = s.domain;
  if (s.client !== undefined) a['tollgate.client'] = s.client;
  if (s.remaining !== undefined) a['tollgate.remaining'] = s.remaining;
  if (s.blocking) {
    a['tollgate.blocking.rule'] = s.blocking.rule;
    a['tollgate.blocking.limit'] = s.blocking.limit;
  }
  return a;
}
