import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import protobuf from 'protobufjs';
import { within } from './time.js';

/** An OTLP trace receiver, as a collector is one: OTLP/HTTP with protobuf or JSON bodies at /v1/traces, or
 * OTLP/gRPC's TraceService/Export, decoding with opentelemetry-proto's own field numbers
 * (test/fixtures/otlp). It keeps every span, normalised to one shape whatever the encoding. */

const PROTO_ROOT = 'test/fixtures/otlp';
const SERVICE_PROTO = 'opentelemetry/proto/collector/trace/v1/trace_service.proto';

export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  /** '' for a root span. */
  parentSpanId: string;
  /** The W3C tracestate the span carries (its parent's). */
  traceState: string;
  name: string;
  /** SPAN_KIND_*: 2 server, 3 client. */
  kind: number;
  attributes: Record<string, unknown>;
  links: { traceId: string; spanId: string }[];
  status: { code: number; message: string };
  resource: Record<string, unknown>;
}

export interface ReceiverOptions {
  /** Answer every export with this HTTP status (a collector refusing). */
  status?: number;
  /** Hold every answer this long (a slow collector). */
  delayMs?: number;
}

export class OtlpReceiver {
  readonly spans: ReceivedSpan[] = [];
  /** Content types of the HTTP exports received ('grpc' for gRPC ones). */
  readonly encodings: string[] = [];
  private closer: () => Promise<void> = async () => {};

  private constructor(public endpoint = '') {}

  /** OTLP/HTTP on a free port; `endpoint` is the full traces URL (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT). */
  static async http(opts: ReceiverOptions = {}): Promise<OtlpReceiver> {
    const r = new OtlpReceiver();
    const decoder = await requestType();
    const server: Server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const body = Buffer.concat(chunks);
        const type = String(req.headers['content-type'] ?? '');
        r.encodings.push(type);
        if (!opts.status)
          r.take(
            type.includes('json') ? JSON.parse(body.toString()) : decoder.toObject(decoder.decode(body), { longs: String, bytes: String, defaults: false }),
            type.includes('json') ? 'hex' : 'base64',
          );
        setTimeout(() => {
          res.writeHead(opts.status ?? 200, { 'content-type': type.includes('json') ? 'application/json' : 'application/x-protobuf' });
          res.end(type.includes('json') ? '{}' : '');
        }, opts.delayMs ?? 0);
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    r.endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/traces`;
    r.closer = () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      });
    return r;
  }

  /** OTLP/gRPC on a free port; `endpoint` is http://127.0.0.1:PORT. */
  static async grpc(): Promise<OtlpReceiver> {
    const r = new OtlpReceiver();
    const def = protoLoader.loadSync(SERVICE_PROTO, { includeDirs: [PROTO_ROOT], keepCase: false, longs: String, bytes: String, defaults: false });
    const pkg = grpc.loadPackageDefinition(def) as unknown as {
      opentelemetry: { proto: { collector: { trace: { v1: { TraceService: { service: grpc.ServiceDefinition } } } } } };
    };
    const server = new grpc.Server();
    server.addService(pkg.opentelemetry.proto.collector.trace.v1.TraceService.service, {
      Export: (call: grpc.ServerUnaryCall<unknown, unknown>, cb: grpc.sendUnaryData<unknown>) => {
        r.encodings.push('grpc');
        r.take(call.request as Otlp, 'base64');
        cb(null, {});
      },
    });
    const port = await new Promise<number>((resolve, reject) =>
      server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))),
    );
    r.endpoint = `http://127.0.0.1:${port}`;
    r.closer = () => new Promise((resolve) => server.tryShutdown(() => resolve()));
    return r;
  }

  /** Waits until a span matching `pred` has arrived and returns it. */
  async waitFor(pred: (s: ReceivedSpan) => boolean, what: string, ms = 10_000): Promise<ReceivedSpan> {
    await within(ms, () => this.spans.some(pred), what);
    return this.spans.find(pred)!;
  }

  close(): Promise<void> {
    return this.closer();
  }

  private take(req: Otlp, ids: 'hex' | 'base64'): void {
    for (const rs of req.resourceSpans ?? []) {
      const resource = attributes(rs.resource?.attributes);
      for (const ss of rs.scopeSpans ?? []) {
        for (const s of ss.spans ?? []) {
          this.spans.push({
            traceId: id(s.traceId, ids),
            spanId: id(s.spanId, ids),
            parentSpanId: id(s.parentSpanId, ids),
            traceState: s.traceState ?? '',
            name: s.name ?? '',
            kind: kindOf(s.kind),
            attributes: attributes(s.attributes),
            links: (s.links ?? []).map((l) => ({ traceId: id(l.traceId, ids), spanId: id(l.spanId, ids) })),
            status: { code: statusOf(s.status?.code), message: s.status?.message ?? '' },
            resource,
          });
        }
      }
    }
  }
}

async function requestType(): Promise<protobuf.Type> {
  const root = new protobuf.Root();
  root.resolvePath = (_origin, target) => `${PROTO_ROOT}/${target}`;
  await root.load(SERVICE_PROTO);
  return root.lookupType('opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest');
}

/** The OTLP request in protobuf's JSON mapping (lowerCamelCase), as both decoders give it. */
interface Otlp {
  resourceSpans?: {
    resource?: { attributes?: KV[] };
    scopeSpans?: {
      spans?: {
        traceId?: string;
        spanId?: string;
        parentSpanId?: string;
        traceState?: string;
        name?: string;
        kind?: number | string;
        attributes?: KV[];
        links?: { traceId?: string; spanId?: string }[];
        status?: { code?: number | string; message?: string };
      }[];
    }[];
  }[];
}
interface KV {
  key: string;
  value?: AnyValue;
}
interface AnyValue {
  stringValue?: string;
  boolValue?: boolean;
  intValue?: string | number;
  doubleValue?: number;
  arrayValue?: { values?: AnyValue[] };
}

/** OTLP/JSON writes ids as hex; the protobuf decoders give bytes as base64. */
function id(v: string | undefined, as: 'hex' | 'base64'): string {
  if (!v) return '';
  return as === 'hex' ? v.toLowerCase() : Buffer.from(v, 'base64').toString('hex');
}

const KINDS = ['SPAN_KIND_UNSPECIFIED', 'SPAN_KIND_INTERNAL', 'SPAN_KIND_SERVER', 'SPAN_KIND_CLIENT'];
function kindOf(k: number | string | undefined): number {
  return typeof k === 'string' ? KINDS.indexOf(k) : (k ?? 0);
}
function statusOf(c: number | string | undefined): number {
  return typeof c === 'string' ? ['STATUS_CODE_UNSET', 'STATUS_CODE_OK', 'STATUS_CODE_ERROR'].indexOf(c) : (c ?? 0);
}

function attributes(list: KV[] | undefined): Record<string, unknown> {
  return Object.fromEntries((list ?? []).map((kv) => [kv.key, anyValue(kv.value)]));
}

function anyValue(v: AnyValue | undefined): unknown {
  if (!v) return undefined;
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.boolValue !== undefined) return v.boolValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.doubleValue !== undefined) return v.doubleValue;
  if (v.arrayValue !== undefined) return (v.arrayValue.values ?? []).map(anyValue);
  return undefined;
}
