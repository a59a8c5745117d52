import http2 from 'node:http2';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { encodeReport, SimEnvoy } from '../helpers/envoy-rlqs.js';
import { metric, scrape } from '../helpers/metrics.js';
import { capturingLogger, startTestService, type TestService } from '../helpers/service.js';
import { within } from '../helpers/time.js';

// What a hostile or broken client does to the RLQS stream: each mistake gets a clear status or is skipped and
// counted, memory stays bounded, and nothing it sent reaches a log line or a metric label.

const MARK = 'rlqs-marker-7f3a';
const log = capturingLogger('debug');
let t: TestService;
const sims: SimEnvoy[] = [];
const sim = (n: number, domain = 'rlqs-test'): SimEnvoy => {
  const s = new SimEnvoy({ ports: [t.service.grpcPort], localAddress: `127.0.0.${n}`, domain, reportIntervalMs: 60_000 });
  sims.push(s);
  return s;
};
const usage = (bucket: Record<string, string>, allowed = 1) => ({ bucket_id: { bucket }, time_elapsed: { seconds: 0 }, num_requests_allowed: allowed });
// biome-ignore lint/suspicious/noExplicitAny: decoded responses
const actions = (s: SimEnvoy): any[] => s.received.flatMap((m: any) => m.bucket_action ?? []);
const INVALID_ARGUMENT = '3';

beforeAll(async () => {
  t = await startTestService({ args: ['--config', 'test/fixtures/rlqs', '--rlqs-report-interval', '1s'], realClock: true, logger: log.logger });
});
// Each test's streams end with it: an open stream's reports would share RLQS's part of the process with the next test's.
afterEach(() => {
  for (const s of sims.splice(0)) s.close();
});

afterAll(async () => {
  for (const s of sims) s.close();
  await t.close();
});

/** A bare HTTP/2 gRPC stream to the RLQS method, for clients no Envoy would be (one that never reads, one that
 * goes silent). */
function rawStream(): { session: http2.ClientHttp2Session; stream: http2.ClientHttp2Stream } {
  const session = http2.connect(`http://127.0.0.1:${t.service.grpcPort}`);
  session.on('error', () => undefined);
  const stream = session.request({
    ':method': 'POST',
    ':path': '/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas',
    'content-type': 'application/grpc',
    te: 'trailers',
  });
  stream.on('error', () => undefined);
  return { session, stream };
}

/** A gRPC message frame: not compressed, its length, the bytes. */
function framed(body: Buffer): Buffer {
  const frame = Buffer.concat([Buffer.from([0, 0, 0, 0, 0]), body]);
  frame.writeUInt32BE(body.length, 1);
  return frame;
}

/** Opens the stream (as the first new bucket does) and sends `usages` as one more report. */
async function report(s: SimEnvoy, first: Record<string, string>, usages: ReturnType<typeof usage>[], domain?: string): Promise<void> {
  s.request(first);
  await within(5000, () => actions(s).length > 0, 'the first assignment');
  s.send(usages, domain);
}

describe('RLQS: bad input', () => {
  it('a first report with no domain ends the stream with INVALID_ARGUMENT', async () => {
    const s = sim(30, '');
    s.request({ tenant: 'a' });
    await within(5000, () => s.statuses.length > 0, 'a status');
    expect(s.statuses).toEqual([INVALID_ARGUMENT]);
    expect(actions(s)).toEqual([]);
  });

  it('a domain changed mid-stream ends it with INVALID_ARGUMENT; the same domain repeated does not', async () => {
    const s = sim(31);
    await report(s, { tenant: 'a' }, [usage({ tenant: 'a' })]);
    await within(5000, () => actions(s).length >= 2, 'the repeated domain answered');
    s.send([usage({ tenant: 'a' })], `other-${MARK}`);
    await within(5000, () => s.statuses.length > 0, 'a status');
    expect(s.statuses).toEqual([INVALID_ARGUMENT]);
  });

  it('bytes that are not a report end the stream with INVALID_ARGUMENT', async () => {
    const s = sim(32);
    s.request({ tenant: 'a' });
    await within(5000, () => actions(s).length > 0, 'the first assignment');
    s.sendRaw(Buffer.from([0x12, 0x03, 0xff, 0xff, 0xff])); // a usage 3 bytes long with 3 bytes left: one field runs past the end
    await within(5000, () => s.statuses.length > 0, 'a status');
    expect(s.statuses).toEqual([INVALID_ARGUMENT]);
  });

  it('an empty bucket id, an empty value and an oversized one get no action and are counted; the rest are assigned', async () => {
    const s = sim(33);
    const before = (await scrape(t.service.httpPort)).series;
    await report(s, { tenant: 'a' }, [usage({}), usage({ tenant: '' }), usage({ tenant: 'x'.repeat(70_000) }), usage({ tenant: 'b' })]);
    await within(5000, () => actions(s).length >= 2, 'the second answer');
    expect(actions(s).map((a) => a.bucket_id.bucket)).toEqual([{ tenant: 'a' }, { tenant: 'b' }]);
    const after = (await scrape(t.service.httpPort)).series;
    const refused = (reason: string) =>
      metric(after, 'tollgate_rlqs_buckets_refused_total', { reason })! - metric(before, 'tollgate_rlqs_buckets_refused_total', { reason })!;
    expect([refused('empty_bucket_id'), refused('bad_bucket_id')]).toEqual([1, 2]);
  });

  it('100,000 buckets on one stream: 10,000 held, the next 10,000 read get ALLOW_ALL without state, the rest nothing', async () => {
    const s = sim(34);
    const before = (await scrape(t.service.httpPort)).series;
    const many = Array.from({ length: 100_000 }, (_, i) => usage({ tenant: `t${i}` }));
    await report(s, { tenant: 'first' }, many);
    await within(30_000, () => actions(s).length >= 20_001, 'the read buckets answered');
    const answered = actions(s).slice(1);
    expect(answered.filter((a) => a.quota_assignment_action?.rate_limit_strategy?.token_bucket).length).toBe(9_999);
    // Past the bound, a bucket in use gets ALLOW_ALL with a TTL: abandoned, Envoy would make it anew and report it
    // at once, admitting it every time.
    expect(answered.filter((a) => a.quota_assignment_action?.rate_limit_strategy?.strategy === 'blanket_rule').length).toBe(10_001);
    s.send(many.map((_, i) => usage({ tenant: `u${i}` })));
    await within(30_000, () => actions(s).length >= 40_001, 'the second report answered');
    expect(
      actions(s)
        .slice(20_001)
        .every((a) => a.quota_assignment_action?.rate_limit_strategy?.strategy === 'blanket_rule'),
    ).toBe(true);
    const series = (await scrape(t.service.httpPort)).series;
    expect(metric(series, 'tollgate_rlqs_buckets')).toBeLessThanOrEqual(10_000 + 10);
    const refused = (m: Map<string, number>) => metric(m, 'tollgate_rlqs_buckets_refused_total', { reason: 'too_many_buckets' })!;
    expect(refused(series) - refused(before)).toBe(10_001 + 80_000 + 100_000);
    const sent = (m: Map<string, number>, strategy: string) => metric(m, 'tollgate_rlqs_assignments_total', { domain: 'rlqs-test', strategy }) ?? 0;
    expect(sent(series, 'allow_all') - sent(before, 'allow_all')).toBe(10_001 + 20_000);
    expect(sent(series, 'token_bucket') - sent(before, 'token_bucket')).toBeGreaterThanOrEqual(10_000);
  }, 60_000);

  it('a client that never reads its answers has its stream ended, and others are still served', async () => {
    const { session, stream } = rawStream();
    stream.pause(); // never reads
    const frame = framed(
      encodeReport(
        'rlqs-test',
        Array.from({ length: 2000 }, (_, i) => usage({ tenant: `n${i}` })),
      ),
    );
    const errors = async () => metric((await scrape(t.service.httpPort)).series, 'tollgate_rlqs_stream_errors_total', { reason: 'not_reading' })!;
    // Answers begin at least a fifth of a report interval apart: up to 20 s of reports before 8 lie unread.
    for (let i = 0; i < 2000 && (await errors()) === 0; i++) {
      stream.write(frame);
      await new Promise((r) => setTimeout(r, 10));
    }
    expect(await errors()).toBe(1);
    const other = sim(35);
    other.request({ tenant: 'a' });
    await within(5000, () => actions(other).length > 0, 'another stream served');
    stream.destroy();
    session.destroy();
  });

  it('a domain longer than MAX_VALUE_BYTES ends the stream with INVALID_ARGUMENT', async () => {
    const s = sim(37, 'd'.repeat(70_000));
    s.request({ tenant: 'a' });
    await within(5000, () => s.statuses.length > 0, 'a status');
    expect(s.statuses).toEqual([INVALID_ARGUMENT]);
  });

  it('past 64 streams from one address, the next is refused with RESOURCE_EXHAUSTED, and one closing makes room', async () => {
    const many = Array.from({ length: 65 }, () => sim(38));
    for (const s of many) s.request({ tenant: 'a' });
    await within(10_000, () => many.every((s) => actions(s).length > 0 || s.statuses.length > 0), 'every stream answered');
    const refused = many.filter((s) => s.statuses.includes('8'));
    expect(refused).toHaveLength(1);
    many.find((s) => !s.statuses.length)!.close();
    // The close reaches the service a moment later: a stream opened before that is still one too many.
    await within(
      10_000,
      async () => {
        const again = sim(38);
        again.request({ tenant: 'a' });
        await within(5000, () => actions(again).length > 0 || again.statuses.length > 0, 'an answer or a status');
        again.close();
        return again.statuses.length === 0;
      },
      'a stream served after one closed',
    );
  });

  it('a stream silent for three report intervals (a dead connection with no close) is ended with OK', async () => {
    const { session, stream } = rawStream();
    stream.on('data', () => undefined);
    const status = new Promise<unknown>((resolve) => stream.on('trailers', (h) => resolve(h['grpc-status'])));
    stream.write(framed(encodeReport('rlqs-test', [usage({ tenant: 'silent' })]))); // one report, then nothing, and no end
    const started = Date.now();
    expect(await status).toBe('0');
    expect(Date.now() - started).toBeGreaterThanOrEqual(3000);
    session.destroy();
  });

  it('a burst of 1,000 reports on one stream in one go is answered together, and others still served', async () => {
    const s = sim(39);
    s.request({ tenant: 'burst' });
    await within(5000, () => actions(s).length > 0, 'the first assignment');
    const before = s.received.length;
    for (let i = 0; i < 1000; i++) s.send([usage({ tenant: 'burst' })]);
    await within(5000, () => s.received.length > before, 'the burst answered');
    s.send([usage({ tenant: 'after' })]);
    await within(5000, () => actions(s).some((a) => a.bucket_id?.bucket?.tenant === 'after'), 'the report after the burst answered');
    // Coalesced: a few answers for 1,001 reports (one each, before), and the stream goes on.
    expect(s.received.length - before).toBeLessThanOrEqual(3);
    expect(s.statuses).toEqual([]);
    const other = sim(40);
    other.request({ tenant: 'after-burst' });
    await within(5000, () => actions(other).length > 0, 'another stream served');
  });

  it('a stream with over 1 MiB of reports waiting is not read until answered (counted), and goes on', async () => {
    const s = sim(43);
    s.request({ tenant: 'paced' });
    await within(5000, () => actions(s).length > 0, 'the first assignment');
    const refused = async () => metric((await scrape(t.service.httpPort)).series, 'tollgate_rlqs_stream_errors_total', { reason: 'too_many_reports' })!;
    const before = await refused();
    const big = Array.from({ length: 2000 }, (_, i) => usage({ tenant: `paced-${i % 50}-${'x'.repeat(280)}` })); // ~600 KB, 50 buckets
    for (let i = 0; i < 3; i++) s.send(big);
    await within(10_000, async () => (await refused()) > before, 'the stream held back');
    s.send([usage({ tenant: 'after-paced' })]);
    await within(10_000, () => actions(s).some((a) => a.bucket_id?.bucket?.tenant === 'after-paced'), 'answered after being held back');
    expect(s.statuses).toEqual([]);
  });

  it('a stream that keeps more than 1 MiB of reports waiting, answer after answer, is ended with RESOURCE_EXHAUSTED', async () => {
    const s = sim(44);
    s.request({ tenant: 'flood' });
    await within(5000, () => actions(s).length > 0, 'the first assignment');
    const big = Array.from({ length: 2000 }, (_, i) => usage({ tenant: `flood-${i % 50}-${'x'.repeat(280)}` })); // ~600 KB, 50 buckets
    for (let i = 0; i < 40 && s.statuses.length === 0; i++) {
      s.send(big);
      await new Promise((r) => setTimeout(r, 50));
    }
    await within(20_000, () => s.statuses.length > 0, 'the flood ended');
    expect(s.statuses).toEqual(['8']);
  });

  it('a report over the 4 MiB message limit ends the stream with RESOURCE_EXHAUSTED, and the process goes on', async () => {
    const s = sim(41);
    s.request({ tenant: 'big' });
    await within(5000, () => actions(s).length > 0, 'the first assignment');
    s.send(Array.from({ length: 150_000 }, (_, i) => usage({ tenant: `big-${i}-${'x'.repeat(20)}` })));
    await within(10_000, () => s.statuses.length > 0, 'a status');
    expect(s.statuses).toEqual(['8']);
    const other = sim(42);
    other.request({ tenant: 'after-big' });
    await within(5000, () => actions(other).length > 0, 'another stream served');
  });

  it('nothing a client sent reaches a log line, a metric label or a status message', async () => {
    const s = sim(36, `d-${MARK}`);
    await report(s, { [`k-${MARK}`]: `v-${MARK}` }, [usage({ tenant: `v-${MARK}` }), usage({ [`k-${MARK}`]: '' })]);
    await within(5000, () => actions(s).length >= 2, 'the second answer');
    s.send([usage({ tenant: 'a' })], `other-${MARK}`);
    await within(5000, () => s.statuses.length > 0, 'the changed domain refused');
    expect(s.messages.join(' ')).toContain('the domain changed mid-stream');
    expect(s.messages.join(' ')).not.toContain(MARK);
    const text = (await scrape(t.service.httpPort)).text;
    expect(text).not.toContain(MARK);
    expect(JSON.stringify(log.lines())).not.toContain(MARK);
    expect(log.lines().some((l) => String(l.msg).startsWith('rlqs stream ended'))).toBe(true);
  });
});
