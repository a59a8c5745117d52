import type { IncomingHttpHeaders } from 'node:http';
import type { Metadata } from '@grpc/grpc-js';
import { type Context, ROOT_CONTEXT, type TextMapGetter } from '@opentelemetry/api';
import { CompositePropagator, W3CTraceContextPropagator } from '@opentelemetry/core';
import { B3Propagator } from '@opentelemetry/propagator-b3';

/** The trace a caller started, read from its headers as envoyproxy/ratelimit reads them (src/trace/trace.go:
 * W3C trace context, then B3, single `b3` or multi `x-b3-*`; a later one wins when both are present). Envoy
 * sends the ones its tracer uses on the rate-limit call. A header that does not parse starts a new trace:
 * the propagators return the context unchanged, never an error. Nothing read here is ever written back. */
const propagator = new CompositePropagator({ propagators: [new W3CTraceContextPropagator(), new B3Propagator()] });

/** W3C trace context: a vendor must propagate 512 characters of tracestate and may drop the rest. Longer
 * is dropped whole, so a hostile list costs no parsing. */
export const MAX_TRACESTATE_CHARS = 512;
/** traceparent is 55 characters, b3 at most 68 (and a parent id): anything far longer is not one. */
const MAX_TRACE_HEADER_CHARS = 256;

/** A header value the propagators may read, or undefined for one over its bound. */
function bounded(key: string, values: readonly string[]): string[] | undefined {
  const max = key === 'tracestate' ? MAX_TRACESTATE_CHARS : MAX_TRACE_HEADER_CHARS;
  let total = 0;
  for (const v of values) total += v.length;
  return values.length === 0 || total > max ? undefined : [...values];
}

const metadataGetter: TextMapGetter<Metadata> = {
  keys: (m) => Object.keys(m.getMap()),
  get: (m, key) =>
    bounded(
      key,
      m.get(key).filter((v): v is string => typeof v === 'string'),
    ),
};

const headersGetter: TextMapGetter<IncomingHttpHeaders> = {
  keys: (h) => Object.keys(h),
  get: (h, key) => {
    const v = h[key];
    return v === undefined ? undefined : bounded(key, typeof v === 'string' ? [v] : v);
  },
};

/** The caller's trace context from gRPC metadata (what Envoy sends) or HTTP headers (/json). */
export function callerContext(carrier: Metadata | IncomingHttpHeaders | undefined): Context {
  if (carrier === undefined) return ROOT_CONTEXT;
  if (isMetadata(carrier)) return propagator.extract(ROOT_CONTEXT, carrier, metadataGetter);
  return propagator.extract(ROOT_CONTEXT, carrier, headersGetter);
}

function isMetadata(c: Metadata | IncomingHttpHeaders): c is Metadata {
  return typeof (c as Metadata).getMap === 'function';
}
