import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SimEnvoy } from '../helpers/envoy-rlqs.js';
import { metric, scrape } from '../helpers/metrics.js';
import { type RedisServer, startRedis } from '../helpers/redis.js';
import { capturingLogger, startTestService, type TestService } from '../helpers/service.js';
import { within } from '../helpers/time.js';

// RLQS while its Redis is frozen (SIGSTOP): reports go unanswered, counted and logged once, the streams stay up,
// Envoy keeps the assignments it has; when Redis answers again, assignments resume on the next report.

let redis: RedisServer;
let t: TestService;
const log = capturingLogger('info');
beforeAll(async () => {
  redis = await startRedis();
  const args = ['--store', 'redis', '--redis-url', redis.url, '--config', 'test/fixtures/rlqs', '--rlqs-report-interval', '1s'];
  t = await startTestService({ args, realClock: true, logger: log.logger });
});
afterAll(async () => {
  redis?.signal('SIGCONT');
  await t?.close();
  await redis?.stop();
});

// biome-ignore lint/suspicious/noExplicitAny: decoded responses
const actions = (s: SimEnvoy): any[] => s.received.flatMap((m: any) => m.bucket_action ?? []);
const unavailable = async () => metric((await scrape(t.service.httpPort)).series, 'tollgate_rlqs_stream_errors_total', { reason: 'store_unavailable' })!;

describe('RLQS with a frozen Redis', () => {
  it('leaves reports unanswered without ending the stream, and assigns again once Redis answers', async () => {
    const s = new SimEnvoy({ ports: [t.service.grpcPort], localAddress: '127.0.0.70', domain: 'rlqs-test', reportIntervalMs: 1000 });
    try {
      s.request({ tenant: 'frozen' });
      await within(5000, () => actions(s).length > 0, 'the first assignment');
      redis.signal('SIGSTOP');
      await within(10_000, async () => (await unavailable()) >= 2, 'two reports not answered');
      const during = actions(s).length;
      expect(s.statuses).toEqual([]); // the stream is still up
      redis.signal('SIGCONT');
      await within(10_000, () => actions(s).length > during, 'an assignment after Redis is back');
      const warnings = log.lines().filter((l) => String(l.msg).startsWith('rlqs reports not assigned'));
      expect(warnings).toHaveLength(1); // at most once a minute, not once per report
    } finally {
      s.close();
    }
  });
});

// RLQS with its Redis down (killed: the connection is refused), on buckets whose rule has an hourly window (every
// property-api rule has one): every report left unanswered is counted and logged, whatever its windows, so
// TollgateRlqsReportsUnanswered fires. A service of its own: the log line comes at most once a minute per process.
describe('RLQS with Redis down, on a rule with an hourly window', () => {
  it('counts every report it cannot answer as store_unavailable and logs it', async () => {
    const down = await startRedis();
    const log2 = capturingLogger('info');
    const args = ['--store', 'redis', '--redis-url', down.url, '--config', 'test/fixtures/rlqs', '--rlqs-report-interval', '1s'];
    const t2 = await startTestService({ args, realClock: true, logger: log2.logger });
    const s = new SimEnvoy({ ports: [t2.service.grpcPort], localAddress: '127.0.0.71', domain: 'rlqs-test', reportIntervalMs: 1000 });
    const count = async () => metric((await scrape(t2.service.httpPort)).series, 'tollgate_rlqs_stream_errors_total', { reason: 'store_unavailable' })!;
    try {
      s.request({ hourly: 'h' }); // hourly-per-second and hourly-per-hour
      await within(5000, () => actions(s).length > 0, 'the first assignment');
      const before = await count();
      down.signal('SIGKILL');
      // One report a second, none answered: each counted.
      await within(10_000, async () => (await count()) >= before + 3, 'three reports counted as unanswered');
      const lines = log2.lines().filter((l) => String(l.msg).startsWith('rlqs reports not assigned'));
      expect(lines).toHaveLength(1);
      expect(lines[0]!.reports).toBe(1);
      expect(s.statuses).toEqual([]); // the stream stays up; Envoy keeps its assignment until its TTL
    } finally {
      s.close();
      await t2.close();
      await down.stop();
    }
  });
});
