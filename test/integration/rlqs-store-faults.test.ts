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
