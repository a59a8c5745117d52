import http2 from 'node:http2';
import net from 'node:net';
import protobuf from 'protobufjs';

/** A simulated Envoy running the rate_limit_quota HTTP filter, over a real HTTP/2 gRPC stream, faithful to what
 * Envoy's source does (docs/design/rlqs-envoy.md, from global_client_impl.cc, filter.cc, filter_persistence.cc):
 *  - one stream per instance and domain, opened lazily on the first bucket; the domain on every message;
 *  - a new bucket is decided by the no-assignment behaviour (ALLOW_ALL) and reported at once, alone, with
 *    time_elapsed 0; a report built while the stream is down is dropped (its counts lost);
 *  - every interval, one report of every bucket (idle ones too), counts as deltas, time_elapsed in whole
 *    seconds; a broken stream is reopened only then (to the next target, as a Service would send it);
 *  - an action for an unknown bucket is ignored; a token bucket equal in max_tokens, tokens_per_fill and
 *    fill_interval.nanos keeps its tokens, a different one starts at the old one's share of remaining tokens,
 *    or full (`changedBucket`: releases declare the token bucket's fourth constructor argument as
 *    `uint64_t initial_tokens` or as `bool init_fill`, docs/design/rlqs-envoy.md), a first one full; the refill
 *    is continuous at tokens_per_fill / whole seconds of fill_interval;
 *  - the TTL counts whole seconds; at expiry the bucket returns to its no-assignment behaviour (it stays and
 *    is still reported); abandon_action drops it. */

const PATH = '/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas';
const root = new protobuf.Root();
root.resolvePath = (_o, target) => (target.startsWith('google/') ? target : `proto/${target}`);
root.loadSync('envoy/service/rate_limit_quota/v3/rlqs.proto', { keepCase: true });
export const Reports = root.lookupType('envoy.service.rate_limit_quota.v3.RateLimitQuotaUsageReports');
export const Response = root.lookupType('envoy.service.rate_limit_quota.v3.RateLimitQuotaResponse');

type Id = Record<string, string>;

interface Limiter {
  max: number;
  perFill: number;
  nanos: number;
  rate: number;
  tokens: number;
  at: number;
}

interface SimBucket {
  id: Id;
  allowed: number;
  denied: number;
  lastReport: number;
  strategy: { kind: 'allow' | 'deny' | 'bucket' } | undefined;
  limiter: Limiter | undefined;
  expires: number;
}

export interface SimOptions {
  /** The replicas' gRPC ports, tried in turn after a failure (a Service's endpoints). */
  ports: number[];
  /** The address this instance connects from (127.0.0.2, …): its identity, as a pod's IP would be. */
  localAddress: string;
  domain: string;
  reportIntervalMs: number;
  /** How a changed token bucket starts: at the old one's share of remaining tokens (the default), or full. */
  changedBucket?: 'share' | 'full';
  /** The x-tollgate-instance header on the stream (the GrpcService's initial_metadata), if any. */
  instanceName?: string;
}

export const key = (id: Id): string => JSON.stringify(Object.entries(id).sort());

export class SimEnvoy {
  readonly buckets = new Map<string, SimBucket>();
  /** Every message received, decoded, and every stream's end status. */
  readonly received: Record<string, unknown>[] = [];
  readonly statuses: (string | undefined)[] = [];
  /** The grpc-message of each status, as sent. */
  readonly messages: string[] = [];
  admitted = 0;
  rejected = 0;
  /** Assignments that ran out before a new one came (a gap: the bucket fell back to ALLOW_ALL). */
  expirations = 0;
  /** Token buckets made anew for a changed assignment (a first one not counted). */
  changes = 0;
  /** Actions applied (every bucket's, every message). */
  actions = 0;
  private session: http2.ClientHttp2Session | undefined;
  private stream: http2.ClientHttp2Stream | undefined;
  private target = 0;
  private timer: NodeJS.Timeout | undefined;
  private buf = Buffer.alloc(0);

  constructor(readonly o: SimOptions) {}

  /** One request matched to `id`: allowed or denied locally, as the filter decides it. */
  request(id: Id, now = Date.now()): boolean {
    const k = key(id);
    let b = this.buckets.get(k);
    if (!b) {
      b = { id, allowed: 1, denied: 0, lastReport: now, strategy: undefined, limiter: undefined, expires: 0 };
      this.buckets.set(k, b);
      this.start();
      this.send([this.usage(b, now)]);
      this.admitted++;
      return true;
    }
    const ok = this.decide(b, now);
    if (ok) b.allowed++;
    else b.denied++;
    if (ok) this.admitted++;
    else this.rejected++;
    return ok;
  }

  /** The rate the bucket's assignment lets through now: its token bucket's, 0 under DENY_ALL, Infinity under
   * ALLOW_ALL; 0 before any assignment or after it ran out (the no-assignment behaviour is not an assignment). */
  rateInForce(id: Id, now = Date.now()): number {
    const b = this.buckets.get(key(id));
    if (!b?.strategy || now >= b.expires) return 0;
    return b.strategy.kind === 'allow' ? Infinity : b.strategy.kind === 'deny' ? 0 : b.limiter!.rate;
  }

  private decide(b: SimBucket, now: number): boolean {
    if (b.strategy && now >= b.expires) {
      this.expirations++;
      b.strategy = undefined; // expired: back to the no-assignment behaviour (ALLOW_ALL); the limiter stays
    }
    if (!b.strategy || b.strategy.kind === 'allow') return true;
    if (b.strategy.kind === 'deny') return false;
    const l = b.limiter!;
    l.tokens = Math.min(l.max, l.tokens + ((now - l.at) / 1000) * l.rate);
    l.at = now;
    if (l.tokens < 1) return false;
    l.tokens -= 1;
    return true;
  }

  private start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => this.tick(), this.o.reportIntervalMs);
    this.connect();
  }

  /** The periodic report: every bucket, counts reset whether or not the send succeeds. */
  private tick(): void {
    const now = Date.now();
    const usages = [...this.buckets.values()].map((b) => this.usage(b, now));
    if (!this.stream) this.connect();
    this.send(usages);
  }

  private usage(b: SimBucket, now: number): Record<string, unknown> {
    const u = {
      bucket_id: { bucket: b.id },
      time_elapsed: { seconds: Math.floor((now - b.lastReport) / 1000) },
      num_requests_allowed: b.allowed,
      num_requests_denied: b.denied,
    };
    b.allowed = 0;
    b.denied = 0;
    b.lastReport = now;
    return u;
  }

  /** A message on the stream, when it is up; dropped otherwise (as Envoy logs and drops it). */
  send(usages: Record<string, unknown>[], domain = this.o.domain): void {
    this.sendRaw(encodeReport(domain, usages));
  }

  sendRaw(body: Buffer): void {
    if (!this.stream || this.stream.closed) return;
    const frame = Buffer.alloc(5 + body.length);
    frame.writeUInt32BE(body.length, 1);
    body.copy(frame, 5);
    this.stream.write(frame);
  }

  private connect(): void {
    const port = this.o.ports[this.target % this.o.ports.length]!;
    this.session?.destroy();
    const session = http2.connect(`http://127.0.0.1:${port}`, {
      createConnection: () => net.connect({ host: '127.0.0.1', port, localAddress: this.o.localAddress }),
    });
    session.on('error', () => undefined);
    const named = this.o.instanceName === undefined ? {} : { 'x-tollgate-instance': this.o.instanceName };
    const stream = session.request({ ':method': 'POST', ':path': PATH, 'content-type': 'application/grpc', te: 'trailers', ...named });
    stream.on('data', (d: Buffer) => this.data(d));
    // A status in trailers, or in the headers of a trailers-only answer (an error before any message); either
    // ends the stream on Envoy's side too (onRemoteClose drops it, to be reopened on the next report).
    const ended = (h: http2.IncomingHttpHeaders): void => {
      if (h['grpc-status'] === undefined) return;
      this.statuses.push(String(h['grpc-status']));
      this.messages.push(decodeURIComponent(String(h['grpc-message'] ?? '')));
      stream.close();
    };
    stream.on('response', ended);
    stream.on('trailers', ended);
    stream.on('error', () => undefined);
    stream.on('close', () => {
      if (this.stream === stream) {
        this.stream = undefined;
        this.target++; // the next attempt goes to another endpoint
      }
    });
    this.session = session;
    this.stream = stream;
    this.buf = Buffer.alloc(0);
  }

  private data(d: Buffer): void {
    this.buf = Buffer.concat([this.buf, d]);
    while (this.buf.length >= 5 && this.buf.length >= 5 + this.buf.readUInt32BE(1)) {
      const len = this.buf.readUInt32BE(1);
      const msg = textIds(Response.toObject(Response.decode(this.buf.subarray(5, 5 + len)), { longs: Number, defaults: false, oneofs: true }));
      this.buf = this.buf.subarray(5 + len);
      this.received.push(msg);
      this.apply(msg, Date.now());
    }
  }

  // biome-ignore lint/suspicious/noExplicitAny: the decoded response, walked field by field
  private apply(msg: any, now: number): void {
    for (const a of msg.bucket_action ?? []) {
      const b = this.buckets.get(key(a.bucket_id?.bucket ?? {}));
      if (!b) continue; // never reported, or abandoned: Envoy logs and ignores it
      if (a.abandon_action) {
        this.buckets.delete(key(b.id));
        continue;
      }
      const q = a.quota_assignment_action;
      const s = q?.rate_limit_strategy;
      this.actions++;
      if (!s?.strategy) continue; // STRATEGY_NOT_SET: discarded
      b.expires = now + (q.assignment_time_to_live?.seconds ?? 0) * 1000;
      if (s.strategy === 'blanket_rule') b.strategy = { kind: (s.blanket_rule ?? 0) === 1 ? 'deny' : 'allow' };
      else if (s.strategy === 'token_bucket') this.applyBucket(b, s.token_bucket, now);
    }
  }

  // biome-ignore lint/suspicious/noExplicitAny: a decoded TokenBucket
  private applyBucket(b: SimBucket, tb: any, now: number): void {
    const max = tb.max_tokens ?? 0;
    const perFill = tb.tokens_per_fill?.value ?? 0;
    const nanos = tb.fill_interval?.nanos ?? 0;
    const seconds = tb.fill_interval?.seconds ?? 0;
    b.strategy = { kind: 'bucket' };
    const old = b.limiter;
    if (old && old.max === max && old.perFill === perFill && old.nanos === nanos) return; // kept, tokens and all
    const rate = seconds >= 1 ? Math.max(perFill / seconds, 1 / 31_536_000) : Infinity;
    let tokens = max;
    if (old) {
      this.changes++;
      old.tokens = Math.min(old.max, old.tokens + ((now - old.at) / 1000) * old.rate);
      if (this.o.changedBucket !== 'full') tokens = Math.floor(max * (old.tokens / old.max));
    }
    b.limiter = { max, perFill, nanos, rate, tokens, at: now };
  }

  /** Ends the stream as Envoy does on shutdown, and stops reporting. */
  close(): void {
    clearInterval(this.timer);
    this.stream?.close();
    this.session?.destroy();
  }
}

/** A report's bytes. Tollgate's proto reads BucketId values as bytes (the same wire form as Envoy's strings):
 * text values are written as their UTF-8, a Buffer as it is (Envoy passes a header's bytes on unchanged). */
export function encodeReport(domain: string, usages: Record<string, unknown>[]): Buffer {
  const asBytes = usages.map((u) => {
    const id = (u.bucket_id as { bucket?: Record<string, string | Buffer> } | undefined)?.bucket;
    if (!id) return u;
    const bucket = Object.fromEntries(Object.entries(id).map(([k, v]) => [k, typeof v === 'string' ? Buffer.from(v, 'utf8') : v]));
    return { ...u, bucket_id: { bucket } };
  });
  return Buffer.from(Reports.encode(Reports.fromObject({ domain, bucket_quota_usages: asBytes })).finish());
}

/** A decoded response with its BucketId values as text (UTF-8), as the tests compare them. */
// biome-ignore lint/suspicious/noExplicitAny: the decoded response, walked field by field
function textIds(msg: any): Record<string, unknown> {
  for (const a of msg.bucket_action ?? []) {
    const id = a.bucket_id?.bucket;
    if (id) a.bucket_id.bucket = Object.fromEntries(Object.entries(id).map(([k, v]) => [k, Buffer.from(v as Uint8Array).toString('utf8')]));
  }
  return msg;
}

/** Offers `rate` requests a second to one bucket of each instance, spread over 10 ms steps, for `ms`. */
export async function offer(load: { sim: SimEnvoy; id: Id; rate: number }[], ms: number): Promise<number[]> {
  const admitted = load.map(() => 0);
  const carry = load.map(() => 0);
  const end = Date.now() + ms;
  let last = Date.now();
  while (Date.now() < end) {
    await new Promise((r) => setTimeout(r, 10));
    const now = Date.now();
    const step = (now - last) / 1000;
    last = now;
    load.forEach((l, i) => {
      carry[i]! += l.rate * step;
      while (carry[i]! >= 1) {
        carry[i]! -= 1;
        if (l.sim.request(l.id, now)) admitted[i]!++;
      }
    });
  }
  return admitted;
}
