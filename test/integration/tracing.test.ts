import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import type { Logger } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { fingerprint } from '../../src/fingerprint.js';
import { metric, scrape } from '../helpers/metrics.js';
import { OtlpReceiver, type ReceivedSpan } from '../helpers/otlp-receiver.js';
import { freePort, runCli, startCli } from '../helpers/process.js';
import { type RedisServer, startRedis } from '../helpers/redis.js';
import { capturingLogger, property, RlsClient, startTestService, type TestService } from '../helpers/service.js';
import { inOneSecond, within } from '../helpers/time.js';

/** Spans as a collector receives them: a real OTLP receiver (HTTP protobuf, HTTP JSON, gRPC), the real
 * service, a real gRPC client sending the headers Envoy's tracers send. */

const RLS_SPAN = 'envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';
const TOKEN = 'Bearer secret-token-7f3a';
const CALLER_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const CALLER_SPAN = '00f067aa0ba902b7';

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  for (const o of open.splice(0).reverse()) await o.close();
});

/** The service with tracing on, its exporter pointed at `receiver` (the exporter reads the standard
 * variable once, at start). Spans are sent 20 ms after they end. */
async function traced(
  receiver: OtlpReceiver,
  args: string[] = [],
  opts: { protocol?: string; env?: Record<string, string>; logger?: Logger } = {},
): Promise<TestService> {
  const env = { OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: receiver.endpoint, ...opts.env };
  const saved = Object.fromEntries(Object.keys(env).map((k) => [k, process.env[k]]));
  Object.assign(process.env, env);
  try {
    const t = await startTestService({
      args: [
        '--tracing',
        'true',
        '--tracing-exporter-protocol',
        opts.protocol ?? 'http',
        '--tracing-schedule-delay-ms',
        '20',
        '--tracing-service-namespace',
        'prod',
        ...args,
      ],
      logger: opts.logger,
    });
    open.push(t);
    return t;
  } finally {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
}

async function receiver(kind: 'http' | 'grpc' = 'http', opts = {}): Promise<OtlpReceiver> {
  const r = kind === 'grpc' ? await OtlpReceiver.grpc() : await OtlpReceiver.http(opts);
  open.push(r);
  return r;
}

function meta(headers: Record<string, string>): grpc.Metadata {
  const m = new grpc.Metadata();
  for (const [k, v] of Object.entries(headers)) m.set(k, v);
  return m;
}

const w3c = (flags = '01') => meta({ traceparent: `00-${CALLER_TRACE}-${CALLER_SPAN}-${flags}` });
const decisionSpan = (s: ReceivedSpan) => s.name === RLS_SPAN;

describe('a decision span', () => {
  it("joins the caller's W3C trace and names the client, rule and limit without a request value (OTLP/HTTP protobuf)", async () => {
    const r = await receiver();
    const t = await traced(r);
    for (let i = 0; i < 2; i++) await t.rls.call(property('reports', TOKEN)); // reports: 2 a second
    const res = await t.rls.call(property('reports', TOKEN), 5000, w3c());
    expect(res.overall_code).toBe('OVER_LIMIT');
    const span = await r.waitFor((s) => decisionSpan(s) && s.traceId === CALLER_TRACE, 'the traced decision');
    expect(span.parentSpanId).toBe(CALLER_SPAN);
    expect(span.kind).toBe(2);
    expect(span.attributes).toMatchObject({
      'rpc.system': 'grpc',
      'rpc.method': 'ShouldRateLimit',
      'rpc.grpc.status_code': 0,
      'tollgate.domain': 'property-api',
      'tollgate.code': 'OVER_LIMIT',
      'tollgate.client': fingerprint(TOKEN),
      'tollgate.blocking.rule': 'category_reports.token',
      'tollgate.blocking.limit': 'reports-per-second',
      'tollgate.remaining': 0,
      'tollgate.store': 'memory',
      'tollgate.descriptors.rule': ['category_reports.token'],
      'tollgate.descriptors.code': ['OVER_LIMIT'],
    });
    expect(span.resource).toMatchObject({ 'service.name': 'RateLimit', 'service.namespace': 'prod' });
    expect(typeof span.resource['service.instance.id']).toBe('string');
    expect(r.encodings.every((e) => e === 'application/x-protobuf')).toBe(true);
    expect(JSON.stringify(r.spans)).not.toContain('secret-token');
  });

  it('joins a B3 trace, multi-header and single-header', async () => {
    const r = await receiver();
    const t = await traced(r);
    const multi = '463ac35c9f6413ad48485a3953bb6124';
    const single = '80f198ee56343ba864fe8b2a57d3eff7';
    await t.rls.call(property('read', TOKEN), 5000, meta({ 'x-b3-traceid': multi, 'x-b3-spanid': 'a2fb4a1d1a96d312', 'x-b3-sampled': '1' }));
    await t.rls.call(property('read', TOKEN), 5000, meta({ b3: `${single}-e457b5a2e4d86bd1-1` }));
    expect((await r.waitFor((s) => s.traceId === multi, 'the x-b3-* decision')).parentSpanId).toBe('a2fb4a1d1a96d312');
    expect((await r.waitFor((s) => s.traceId === single, 'the b3 decision')).parentSpanId).toBe('e457b5a2e4d86bd1');
  });

  it('is sent as OTLP/HTTP JSON, and traces /json calls from their HTTP headers', async () => {
    const r = await receiver();
    const t = await traced(r, [], { protocol: 'http/json' });
    const res = await fetch(`http://127.0.0.1:${t.service.httpPort}/json`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', traceparent: `00-${CALLER_TRACE}-${CALLER_SPAN}-01` },
      body: JSON.stringify(property('write', TOKEN)),
    });
    expect(res.status).toBe(200);
    const span = await r.waitFor((s) => s.traceId === CALLER_TRACE, 'the /json decision');
    expect(span.name).toBe('POST /json');
    expect(span.attributes).toMatchObject({ 'http.response.status_code': 200, 'tollgate.code': 'OK', 'tollgate.client': fingerprint(TOKEN) });
    expect(r.encodings[0]).toContain('application/json');
  });

  it('is sent over OTLP/gRPC', async () => {
    const r = await receiver('grpc');
    const t = await traced(r, [], { protocol: 'grpc' });
    await t.rls.call(property('read', TOKEN), 5000, w3c());
    const span = await r.waitFor((s) => s.traceId === CALLER_TRACE, 'the decision over gRPC');
    expect(span.attributes['tollgate.code']).toBe('OK');
    expect(r.encodings).toContain('grpc');
  });

  it('names no unknown domain and no descriptor value, and records a refused request as an error', async () => {
    const r = await receiver();
    const t = await traced(r);
    const hostile = 'domain-holding-a-secret-9c1d';
    await t.rls.call({ domain: hostile, descriptors: [{ entries: [{ key: 'k-secret-key', value: 'v-secret-value' }] }], hits_addend: 0 }, 5000, w3c());
    const unknown = await r.waitFor((s) => s.traceId === CALLER_TRACE, "the unknown domain's decision");
    expect(unknown.attributes['tollgate.domain.known']).toBe(false);
    expect(unknown.attributes['tollgate.domain']).toBeUndefined();
    await expect(
      t.rls.call({ domain: 'property-api', descriptors: [], hits_addend: 0 }, 5000, meta({ traceparent: `00-${'1'.repeat(32)}-${CALLER_SPAN}-01` })),
    ).rejects.toThrow(/INVALID_ARGUMENT|no descriptors/);
    const refused = await r.waitFor((s) => s.traceId === '1'.repeat(32), 'the refused call');
    expect(refused.status.code).toBe(2);
    expect(refused.attributes).toMatchObject({ 'rpc.grpc.status_code': grpc.status.INVALID_ARGUMENT, 'error.type': 'InvalidRequestError' });
    const all = JSON.stringify(r.spans);
    for (const secret of [hostile, 'k-secret-key', 'v-secret-value']) expect(all).not.toContain(secret);
  });
});

describe('sampling', () => {
  it('TRACING_SAMPLING_RATE=0 exports no span of an untraced call, and still follows a sampled caller', async () => {
    const r = await receiver();
    const log = capturingLogger('info');
    const t = await traced(r, ['--tracing-sampling-rate', '0', '--decision-log', 'all'], { logger: log.logger });
    for (let i = 0; i < 20; i++) await t.rls.call(property('read', `t${i}`));
    await t.rls.call(property('read', TOKEN), 5000, w3c('00')); // the caller chose not to sample
    await t.rls.call(property('read', TOKEN), 5000, meta({ traceparent: `00-${'2'.repeat(32)}-${CALLER_SPAN}-01` }));
    await r.waitFor((s) => s.traceId === '2'.repeat(32), "the sampled caller's decision");
    // Spans of one process leave in the order they ended: had any earlier one been sampled, it came first.
    expect(r.spans.map((s) => s.traceId)).toEqual(['2'.repeat(32)]);
    // The decision log names the caller's trace, sampled or not, and never an unsampled one started here.
    const ids = log
      .lines()
      .filter((l) => l.msg === 'decision')
      .map((l) => l.trace_id);
    expect(ids).toEqual([...Array(20).fill(undefined), CALLER_TRACE, '2'.repeat(32)]);
  });
});

describe('headers that are not a trace', () => {
  it('a malformed traceparent or B3 value starts a new trace; an oversize tracestate is dropped; none is an error', async () => {
    const r = await receiver();
    const t = await traced(r);
    const bad: Record<string, string>[] = [
      { traceparent: `00-${'0'.repeat(32)}-${CALLER_SPAN}-01` }, // all-zero trace id
      { traceparent: 'zz-not-a-traceparent-%%%-x' },
      { traceparent: `00-${CALLER_TRACE}-${CALLER_SPAN}-01-extra` },
      { traceparent: `00-${CALLER_TRACE.repeat(40)}-${CALLER_SPAN}-01` },
      { b3: 'garbage-b3-value' },
      { 'x-b3-traceid': 'nothex!', 'x-b3-spanid': '12' },
    ];
    for (const h of bad) expect((await t.rls.call(property('read', TOKEN), 5000, meta(h))).overall_code).toBe('OK');
    await within(10_000, () => r.spans.length >= bad.length, 'a span per call');
    for (const s of r.spans) {
      expect(s.parentSpanId).toBe('');
      expect(s.traceId).toMatch(/^[0-9a-f]{32}$/);
      expect(s.traceId).not.toBe('0'.repeat(32));
      expect(s.traceId).not.toBe(CALLER_TRACE);
    }
    const long = Array.from({ length: 60 }, (_, i) => `v${i}=${'x'.repeat(10)}`).join(',');
    await t.rls.call(property('read', TOKEN), 5000, meta({ traceparent: `00-${'3'.repeat(32)}-${CALLER_SPAN}-01`, tracestate: long }));
    await t.rls.call(property('read', TOKEN), 5000, meta({ traceparent: `00-${'4'.repeat(32)}-${CALLER_SPAN}-01`, tracestate: 'congo=t61rcWkgMzE' }));
    const oversize = await r.waitFor((s) => s.traceId === '3'.repeat(32), 'the oversize tracestate call');
    expect(oversize.parentSpanId).toBe(CALLER_SPAN);
    expect(oversize.traceState).toBe('');
    expect((await r.waitFor((s) => s.traceId === '4'.repeat(32), 'the short tracestate call')).traceState).toBe('congo=t61rcWkgMzE');
    expect(JSON.stringify(r.spans)).not.toContain('zz-not-a-traceparent');
  });
});

describe('a collector that is down or slow', () => {
  it('changes no decision; lost spans are counted', async () => {
    const dead = await freePort();
    // The exporter retries a refused connection until its own timeout: 300 ms here.
    const t = await traced({ endpoint: `http://127.0.0.1:${dead}/v1/traces` } as OtlpReceiver, [], { env: { OTEL_EXPORTER_OTLP_TRACES_TIMEOUT: '300' } });
    const answers = [];
    for (let i = 0; i < 12; i++) answers.push((await t.rls.call(property('reports', TOKEN), 1000, w3c())).overall_code);
    expect(answers).toEqual(['OK', 'OK', ...Array(10).fill('OVER_LIMIT')]); // reports: 2 a second, as without tracing
    await within(
      15_000,
      async () => (metric((await scrape(t.service.httpPort)).series, 'tollgate_tracing_spans_total', { result: 'export_failed' }) ?? 0) >= 12,
      'failed exports counted',
    );
  });

  it('holds no more spans than its queue and drops the rest, counted, while every call is answered in time', async () => {
    const r = await receiver('http', { delayMs: 1500 });
    const t = await traced(r, ['--tracing-queue-size', '16', '--tracing-batch-size', '4']);
    const calls = await Promise.all(Array.from({ length: 200 }, (_, i) => t.rls.call(property('read', `tok-${i}`), 1000, w3c())));
    expect(calls.every((c) => c.overall_code === 'OK')).toBe(true);
    const { series } = await scrape(t.service.httpPort);
    expect(metric(series, 'tollgate_tracing_spans_total', { result: 'queue_full' })).toBeGreaterThanOrEqual(200 - 16);
    expect(metric(series, 'tollgate_tracing_queue_spans')).toBeLessThanOrEqual(16);
  });
});

describe('the Redis batch span', () => {
  let redis: RedisServer | undefined;
  afterEach(async () => {
    await redis?.stop();
    redis = undefined;
  });

  it('is a child of a decision it carried and links every sampled decision of the batch', async () => {
    redis = await startRedis();
    const r = await receiver();
    const t = await traced(r, ['--store', 'redis', '--redis-url', `redis://127.0.0.1:${redis.port}`, '--redis-timeout-ms', '500']);
    const traces = Array.from({ length: 8 }, (_, i) => `${String(i + 5).padStart(2, '0')}${'a'.repeat(30)}`);
    await Promise.all(traces.map((id) => t.rls.call(property('read', TOKEN), 5000, meta({ traceparent: `00-${id}-${CALLER_SPAN}-01` }))));
    const batch = await r.waitFor((s) => s.name === 'redis check-and-incr', 'a batch span');
    await within(10_000, () => r.spans.filter(decisionSpan).length === traces.length, 'every decision span');
    const decisions = r.spans.filter(decisionSpan);
    const carried = decisions.filter((d) => batch.links.some((l) => l.spanId === d.spanId && l.traceId === d.traceId));
    expect(carried.length).toBeGreaterThan(0);
    expect(batch.links.length).toBe(batch.attributes['tollgate.batch.requests']);
    expect(carried.some((d) => d.spanId === batch.parentSpanId && d.traceId === batch.traceId)).toBe(true);
    expect(batch.kind).toBe(3);
    const linked = new Set(r.spans.filter((s) => s.name === 'redis check-and-incr').flatMap((s) => s.links.map((l) => l.spanId)));
    expect(decisions.every((d) => linked.has(d.spanId))).toBe(true);
    expect(decisions[0]!.attributes['tollgate.store']).toBe('redis');
  });
});

describe('the decision log', () => {
  it('writes a line per 429 with trace id, client fingerprint, rule and limit, whatever LOG_LEVEL says', async () => {
    const log = capturingLogger('warn');
    const t = await startTestService({ args: ['--decision-log', 'over'], logger: log.logger });
    open.push(t);
    for (let i = 0; i < 2; i++) await t.rls.call(property('reports', TOKEN));
    await t.rls.call(property('reports', TOKEN), 5000, w3c());
    const lines = log.lines().filter((l) => l.log === 'decision');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({
      msg: 'decision',
      trace_id: CALLER_TRACE,
      domain: 'property-api',
      client: fingerprint(TOKEN),
      code: 'OVER_LIMIT',
      rule: 'category_reports.token',
      limit: 'reports-per-second',
      remaining: 0,
      source: 'store',
    });
    expect(lines[0]!.retry_after_ms).toBeGreaterThan(0);
    expect(JSON.stringify(log.lines())).not.toContain('secret-token');
  });

  it('all: a line per decision up to its bound a second; the rest are dropped and counted', async () => {
    const log = capturingLogger('info');
    const t = await startTestService({ args: ['--decision-log', 'all', '--decision-log-max-per-second', '5'], logger: log.logger });
    open.push(t);
    await Promise.all(Array.from({ length: 40 }, (_, i) => t.rls.call(property('read', `tok-${i}`))));
    const lines = log.lines().filter((l) => l.msg === 'decision');
    const dropped = metric((await scrape(t.service.httpPort)).series, 'tollgate_decision_log_dropped_total')!;
    // The bound is per wall-clock second: a burst that straddles one writes up to twice it.
    expect(lines.length).toBeGreaterThanOrEqual(5);
    expect(lines.length).toBeLessThanOrEqual(10);
    expect(lines.length + dropped).toBe(40);
    expect(lines[0]).toMatchObject({ code: 'OK', rule: 'category_read.token', limit: 'read-per-second' });
  });
});

describe('tollgate serve and tollgate explain --log', () => {
  it('sends spans where TRACING_ENABLED and OTEL_EXPORTER_OTLP_TRACES_ENDPOINT say; explain --log finds the 429 of a client', async () => {
    const r = await receiver();
    const [grpcPort, httpPort] = [await freePort(), await freePort()];
    const d = await startCli(['serve', '--grpc-port', String(grpcPort), '--http-port', String(httpPort), '--admin-port', '0'], /tollgate serving/, {
      TRACING_ENABLED: 'true',
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: r.endpoint,
      OTEL_BSP_SCHEDULE_DELAY: '20',
      TRACING_SERVICE_NAME: 'rl-prod',
      DECISION_LOG: 'over',
    });
    open.push({
      close: async () => {
        d.child.kill('SIGTERM');
        await d.exited;
      },
    });
    const rls = new RlsClient(grpcPort);
    const answers = await inOneSecond(async () => {
      const out = [];
      for (let i = 0; i < 3; i++) out.push((await rls.call(property('reports', TOKEN), 5000, w3c())).overall_code);
      return out;
    });
    await rls.call(property('reports', 'another-token'), 5000, w3c());
    rls.close();
    expect(answers).toEqual(['OK', 'OK', 'OVER_LIMIT']);
    const span = await r.waitFor((s) => s.traceId === CALLER_TRACE, 'the span from the CLI');
    expect(span.resource['service.name']).toBe('rl-prod');

    await within(5000, () => (d.output().match(/"msg":"decision"/g) ?? []).length >= 1, 'the decision line');
    const file = join(mkdtempSync(join(tmpdir(), 'tollgate-log-')), 'pod.log');
    // What kubectl logs gives: the service's lines among others, a huge line and a broken one included.
    writeFileSync(file, `not json\n{"broken":\n${'x'.repeat(300_000)}\n${d.output()}`);
    const found = await runCli(['explain', '--log', file, '--client', TOKEN]);
    expect(found.code).toBe(0);
    expect(found.stdout).toMatch(/1 decision match/);
    expect(found.stdout).toMatch(
      new RegExp(
        `OVER_LIMIT .*property-api .*client ${fingerprint(TOKEN)} .*rule category_reports.token .*limit reports-per-second .*remaining 0 .*retry in ` +
          `.*trace ${CALLER_TRACE}`,
      ),
    );
    expect(found.stdout).not.toContain('secret-token');
    const byTrace = await runCli(['explain', '--log', file, '--trace-id', CALLER_TRACE.toUpperCase(), '--json']);
    expect((JSON.parse(byTrace.stdout) as unknown[]).length).toBe(1);
    const none = await runCli(['explain', '--log', file, '--client', fingerprint('nobody')]);
    expect(none.code).toBe(1);
    expect(none.stderr).toMatch(/no decision matches among 1/);
  });
});

describe('RLQS answers in traces and the decision log', () => {
  it('one span and one decision-log line per answered report, with counts, strategies and no bucket text', async () => {
    const { SimEnvoy } = await import('../helpers/envoy-rlqs.js');
    const r = await receiver();
    const log = capturingLogger('info');
    const t = await traced(r, ['--config', 'test/fixtures/rlqs', '--rlqs-report-interval', '1s', '--decision-log', 'all'], { logger: log.logger });
    const sim = new SimEnvoy({ ports: [t.service.grpcPort], localAddress: '127.0.0.50', domain: 'rlqs-test', reportIntervalMs: 60_000 });
    open.push({ close: async () => sim.close() });
    sim.request({ tenant: 'secret-token-7f3a' });
    const span = await r.waitFor((s) => s.name.endsWith('/StreamRateLimitQuotas report'), 'the report span');
    expect(span.name).toBe('envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas report');
    expect(span.attributes).toMatchObject({
      'rpc.method': 'StreamRateLimitQuotas',
      'tollgate.domain': 'rlqs-test',
      'tollgate.rlqs.buckets': 1,
      'tollgate.rlqs.allowed': 1,
      'tollgate.rlqs.token_bucket': 1,
      'tollgate.rlqs.deny_all': 0,
    });
    await within(5000, () => log.lines().some((l) => l.msg === 'rlqs assignment'), 'the decision-log line');
    const line = log.lines().find((l) => l.msg === 'rlqs assignment')!;
    const strategies = { token_bucket: 1, allow_all: 0, deny_all: 0, abandon: 0 };
    expect(line).toMatchObject({ log: 'decision', domain: 'rlqs-test', buckets: 1, allowed: 1, strategies });
    expect(line.instance).toMatch(/^[0-9a-f]{32}$/);
    expect(JSON.stringify(r.spans) + JSON.stringify(log.lines())).not.toContain('secret-token');
  });
});
