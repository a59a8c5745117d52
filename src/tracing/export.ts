import { type Context, TraceFlags } from '@opentelemetry/api';
import { type ExportResult, ExportResultCode } from '@opentelemetry/core';
import { BatchSpanProcessor, type ReadableSpan, type Span, type SpanExporter, type SpanProcessor } from '@opentelemetry/sdk-trace';

export type ExportProtocol = 'http/protobuf' | 'http/json' | 'grpc';

/** What happened to each finished span: sent, refused or lost by the collector, or dropped because the
 * queue was full (a dead or slow collector). tollgate_tracing_spans_total counts them. */
export type SpanOutcome = 'exported' | 'export_failed' | 'queue_full';

export interface QueueOptions {
  /** Most finished spans held, queued or being sent: the whole memory tracing may take. */
  maxQueueSize: number;
  maxExportBatchSize: number;
  scheduledDelayMs: number;
  exportTimeoutMs: number;
}

/** The OTLP exporter of a protocol; it reads the standard OTEL_EXPORTER_OTLP_* variables itself (endpoint,
 * headers, timeout, compression, certificates). Loaded on demand: a service without tracing loads none. */
export async function otlpExporter(protocol: ExportProtocol): Promise<SpanExporter> {
  if (protocol === 'grpc') return new (await import('@opentelemetry/exporter-trace-otlp-grpc')).OTLPTraceExporter();
  if (protocol === 'http/json') return new (await import('@opentelemetry/exporter-trace-otlp-http')).OTLPTraceExporter();
  return new (await import('@opentelemetry/exporter-trace-otlp-proto')).OTLPTraceExporter();
}

/** The SDK's batch processor, behind a gate that counts every span it holds, queued or in an export, and
 * drops (and counts) a span that would pass maxQueueSize. The SDK's own queue drops silently and does not
 * bound spans already handed to an exporter that hangs; this bound covers both. */
export class BoundedSpanProcessor implements SpanProcessor {
  private held = 0;
  private readonly inner: BatchSpanProcessor;

  constructor(
    exporter: SpanExporter,
    private readonly opts: QueueOptions,
    private readonly outcome: (o: SpanOutcome, n: number, err?: Error) => void,
  ) {
    const counting: SpanExporter = {
      export: (spans, done) => exporter.export(spans, (r) => this.exported(spans.length, r, done)),
      shutdown: () => exporter.shutdown(),
      forceFlush: () => exporter.forceFlush?.() ?? Promise.resolve(),
    };
    this.inner = new BatchSpanProcessor({
      exporter: counting,
      maxQueueSize: opts.maxQueueSize,
      maxExportBatchSize: Math.min(opts.maxExportBatchSize, opts.maxQueueSize),
      scheduledDelayMillis: opts.scheduledDelayMs,
      exportTimeoutMillis: opts.exportTimeoutMs,
    });
  }

  private exported(n: number, r: ExportResult, done: (r: ExportResult) => void): void {
    this.held = Math.max(0, this.held - n);
    if (r.code === ExportResultCode.SUCCESS) this.outcome('exported', n);
    else this.outcome('export_failed', n, r.error);
    done(r);
  }

  onStart(span: Span, parent: Context): void {
    this.inner.onStart(span, parent);
  }

  onEnd(span: ReadableSpan): void {
    // The batch processor exports sampled spans only; a recorded but unsampled one must not hold a place.
    if ((span.spanContext().traceFlags & TraceFlags.SAMPLED) === 0) return;
    if (this.held >= this.opts.maxQueueSize) {
      this.outcome('queue_full', 1);
      return;
    }
    this.held++;
    this.inner.onEnd(span);
  }

  /** Spans queued or being exported now. */
  get size(): number {
    return this.held;
  }

  forceFlush(): Promise<void> {
    return this.inner.forceFlush();
  }

  shutdown(): Promise<void> {
    return this.inner.shutdown();
  }
}
