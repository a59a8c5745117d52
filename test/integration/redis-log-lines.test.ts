import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RedisServer, startRedis } from '../helpers/redis.js';
import { capturingLogger, startTestService, type TestService } from '../helpers/service.js';
import { within } from '../helpers/time.js';

// An operator reading "redis store degraded" needs to know which Redis: every line of the store names it by
// host:port (the URL's credentials are never logged: see migration.test.ts).
describe('Redis store log lines', () => {
  let redis: RedisServer;
  let t: TestService;
  const log = capturingLogger('debug');
  beforeAll(async () => {
    redis = await startRedis();
    t = await startTestService({ realClock: true, logger: log.logger, args: ['--store', 'redis', '--redis-url', redis.url] });
  });
  afterAll(async () => {
    await t?.close();
    await redis?.stop();
  });

  it('name host:port when the store degrades and when it recovers', async () => {
    const line = (msg: string) => log.lines().find((l) => l.msg === msg);
    redis.signal('SIGKILL');
    await within(10_000, () => line('redis store degraded') !== undefined);
    await redis.restart();
    await within(10_000, () => line('redis store recovered') !== undefined);
    expect(line('redis store degraded')).toMatchObject({ redis: `127.0.0.1:${redis.port}` });
    expect(line('redis store recovered')).toMatchObject({ redis: `127.0.0.1:${redis.port}` });
  });
});
