import { status } from '@grpc/grpc-js';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { fingerprint } from '../../src/fingerprint.js';
import { jsonOf } from '../helpers/json.js';
import { metric, scrape } from '../helpers/metrics.js';
import { type RedisServer, startRedis } from '../helpers/redis.js';
import { capturingLogger, configDir, property, type RlsRequest, startTestService, type TestService } from '../helpers/service.js';
import { within } from '../helpers/time.js';

/** Issue 22, items 2 and 8: one request's keys refused by Redis (a key of another type; Redis out of memory)
 * fail that request alone, under every failure policy; the others of the same batch are decided and counted,
 * the refused one writes nothing, and the refusal is counted, logged once and (out of memory) visible. */

async function outcome(t: TestService, token: string): Promise<string> {
  try {
    return (await t.rls.call(property('read', token), 2000)).overall_code;
  } catch (err) {
    return `error ${(err as { code: number }).code}`;
  }
}

const POISON_EXPECTED: Record<string, string> = { allow: `error ${status.UNAVAILABLE}`, deny: 'OVER_LIMIT', local: 'OK' };

describe.each(['allow', 'deny', 'local'])('a poisoned counter key amid 50 other clients, policy %s', (policy) => {
  let redis: RedisServer;
  let t: TestService;
  const log = capturingLogger();
  beforeEach(async () => {
    redis = await startRedis();
    t = await startTestService({
      realClock: true,
      logger: log.logger,
      args: ['--store', 'redis', '--redis-url', redis.url, '--redis-timeout-ms', '1000', '--redis-failure', policy, '--local-cache', 'false'],
    });
  });
  afterEach(async () => {
    await t?.close();
    await redis?.stop();
  });

  it('fails the poisoned request alone, writes nothing for it, and counts and logs the refusal once', async () => {
    const poisoned = `Bearer poisoned-${policy}`;
    expect(await outcome(t, poisoned)).toBe('OK');
    const keys = (await redis.cli('--scan', '--pattern', `*${fingerprint(poisoned)}*`)).split('\n').filter(Boolean).sort();
    expect(keys.length).toBeGreaterThanOrEqual(2); // a second and an hour window
    const perSecond = keys.filter((k) => /:second:\d+$/.test(k));
    const hourly = keys.find((k) => /:hour:\d+$/.test(k))!;
    // The hour's counter (its name holds for the hour) is given a value that is not a count.
    await redis.cli('SET', hourly, 'not a count');

    // 51 concurrent calls: the service batches them into one script call.
    const others = Array.from({ length: 50 }, (_, i) => `Bearer other-${policy}-${i}`);
    const results = await Promise.all([outcome(t, poisoned), ...others.map((o) => outcome(t, o))]);
    expect(results[0]).toBe(POISON_EXPECTED[policy]);
    expect(results.slice(1)).toEqual(Array(50).fill('OK'));
    // No partial write for the refused request (its per-second counter neither grew nor appeared in a new
    // second); every other one was counted in Redis.
    expect(await redis.cli('GET', hourly)).toBe('not a count');
    const secondsAfter = (await redis.cli('--scan', '--pattern', `*${fingerprint(poisoned)}*:second:*`)).split('\n').filter(Boolean).sort();
    expect(secondsAfter).toEqual(perSecond);
    for (const k of secondsAfter) expect(await redis.cli('GET', k)).toBe('1');
    for (const o of others.slice(0, 5)) expect(await redis.cli('--scan', '--pattern', `*${fingerprint(o)}*:hour:*`)).not.toBe('');

    for (let i = 0; i < 20; i++) await outcome(t, poisoned);
    const { series } = await scrape(t.service.httpPort);
    expect(metric(series, 'tollgate_store_errors_total', { store: 'redis', kind: 'wrong_type' })).toBeGreaterThanOrEqual(21);
    expect(log.lines().filter((l) => l.kind === 'WRONGTYPE')).toHaveLength(1);
    // The store is not degraded by one bad key, and the local policy did not flap into fallback mode.
    expect(t.service.store.health().degraded).toBe(false);
    expect(log.lines().filter((l) => String(l.msg).startsWith('shared store unavailable'))).toEqual([]);
  });
});

/** Issue 36, item 12: values Lua's tonumber reads but INCRBY refuses. Before, such a value passed the script's
 * check, the request's other window was written (1 → 2), then INCRBY refused the hour's: a partial write,
 * counted as `other`. Now refused before any write, as `wrong_type`, on the plain path (fixed windows) and the
 * general one (a sliding window). Minute windows, not seconds: their counters outlive the test's steps. */
describe('counter values that are not plain decimal counts', () => {
  let redis: RedisServer;
  let t: TestService;
  const domain = (name: string, hourAlgorithm: string): string =>
    [
      `domain: ${name}`,
      'descriptors:',
      '  - key: token',
      '    rate_limits:',
      '      - {unit: minute, requests_per_unit: 100}',
      `      - {unit: hour, requests_per_unit: 1000, algorithm: ${hourAlgorithm}}`,
      '',
    ].join('\n');
  beforeEach(async () => {
    redis = await startRedis();
    const dir = configDir({ 'fixed.yaml': domain('fixed', 'fixed_window'), 'sliding.yaml': domain('sliding', 'sliding_window') });
    t = await startTestService({
      realClock: true,
      configDir: dir,
      args: ['--store', 'redis', '--redis-url', redis.url, '--redis-timeout-ms', '1000', '--redis-failure', 'allow', '--local-cache', 'false'],
    });
  });
  afterEach(async () => {
    await t?.close();
    await redis?.stop();
  });

  const request = (name: string, token: string): RlsRequest => ({ domain: name, descriptors: [{ entries: [{ key: 'token', value: token }] }] });
  const call = async (name: string, token: string): Promise<string> => {
    try {
      return (await t.rls.call(request(name, token), 2000)).overall_code;
    } catch (err) {
      return `error ${(err as { code: number }).code}`;
    }
  };
  const counters = async (name: string, token: string, unit: string): Promise<string[]> =>
    (await redis.cli('--scan', '--pattern', `*:${name}:*${fingerprint(token)}*:${unit}:*`)).split('\n').filter(Boolean).sort();
  const VALUES = ['1e1', '0x5', ' 5', '5 ', '5.0', 'nan', '-inf', 'inf', '+5', '05', '-0', '9223372036854775807'];

  it.each(['fixed', 'sliding'])('%s: refused before any write, counted as wrong_type', async (name) => {
    for (const [i, value] of VALUES.entries()) {
      const token = `Bearer odd-${i}`;
      expect(await call(name, token)).toBe('OK');
      const [hourly] = await counters(name, token, 'hour');
      const minutes = await counters(name, token, 'minute');
      expect(minutes).toHaveLength(1);
      await redis.cli('SET', hourly!, value);
      expect(await call(name, token), `hour counter ${JSON.stringify(value)}`).toBe(`error ${status.UNAVAILABLE}`);
      expect(await redis.cli('GET', hourly!)).toBe(value.trim()); // (the helper trims what redis-cli prints)
      // Nothing written for it: its minute counter did not grow, and none appeared for a new minute.
      expect(await counters(name, token, 'minute'), `minute counters after ${JSON.stringify(value)}`).toEqual(minutes);
      expect(await redis.cli('GET', minutes[0]!), `minute count after ${JSON.stringify(value)}`).toBe('1');
    }
    const { series } = await scrape(t.service.httpPort);
    expect(metric(series, 'tollgate_store_errors_total', { store: 'redis', kind: 'wrong_type' })).toBe(VALUES.length);
    expect(metric(series, 'tollgate_store_errors_total', { store: 'redis', kind: 'other' })).toBe(0);
  });

  it('plain decimal counts are read as counts: 0, a negative one, and one of 18 characters', async () => {
    for (const [i, [value, code, after]] of [
      ['0', 'OK', '1'],
      ['-3', 'OK', '-2'],
      ['999999999999999998', 'OVER_LIMIT', '999999999999999998'],
    ].entries()) {
      const token = `Bearer plain-${i}`;
      expect(await call('fixed', token)).toBe('OK');
      const [hourly] = await counters('fixed', token, 'hour');
      await redis.cli('SET', hourly!, value!);
      expect(await call('fixed', token)).toBe(code);
      expect(await redis.cli('GET', hourly!)).toBe(after);
    }
  });
});

describe('Redis out of memory (maxmemory reached, noeviction)', () => {
  let redis: RedisServer | undefined;
  let t: TestService | undefined;
  afterEach(async () => {
    await t?.close();
    await redis?.stop();
  });

  it('is visible: one log line, tollgate_store_errors_total{kind="out_of_memory"}, tollgate_store_degraded and /readyz', async () => {
    redis = await startRedis(['--maxmemory-policy', 'noeviction']);
    const log = capturingLogger();
    t = await startTestService({ realClock: true, logger: log.logger, args: ['--store', 'redis', '--redis-url', redis.url, '--redis-timeout-ms', '1000'] });
    expect(await outcome(t, 'Bearer before-oom')).toBe('OK');
    const used = Number(/used_memory:(\d+)/.exec(await redis.cli('INFO', 'memory'))![1]);
    // Already over, by more than Redis frees on its own meanwhile (the query buffer that loaded the ~50 KB decision
    // script is given back in the background): every write refused.
    await redis.cli('CONFIG', 'SET', 'maxmemory', String(used - 1024 * 512));
    const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => outcome(t!, `Bearer oom-${i}`)));
    expect(answers).toEqual(Array(20).fill(`error ${status.UNAVAILABLE}`)); // allow: Envoy decides (fails open)
    await within(2000, () => log.lines().some((l) => l.kind === 'OOM'), 'the out-of-memory log line');
    expect(log.lines().filter((l) => l.kind === 'OOM')).toHaveLength(1);
    const { series } = await scrape(t.service.httpPort);
    expect(metric(series, 'tollgate_store_errors_total', { store: 'redis', kind: 'out_of_memory' })).toBe(20);
    expect(metric(series, 'tollgate_store_degraded', { store: 'redis' })).toBe(1);
    const ready = await fetch(`http://127.0.0.1:${t.service.httpPort}/readyz`);
    expect((await jsonOf(ready)).reason).toMatch(/out of memory/);
    // Room again: the next decisions count.
    await redis.cli('CONFIG', 'SET', 'maxmemory', '0');
    expect(await outcome(t, 'Bearer after-oom')).toBe('OK');
  });
});

describe('the key layout version', () => {
  it("keys of another layout at the same names (a rolling upgrade's other release) are never read: no refusal, no shared count", async () => {
    const redis = await startRedis();
    const t = await startTestService({ realClock: true, args: ['--store', 'redis', '--redis-url', redis.url, '--redis-timeout-ms', '1000'] });
    try {
      const token = 'Bearer upgrade';
      // What releases before wrote at these names (none, then v1's hashes), and what a later layout might put there.
      const fp = fingerprint(token);
      const hour = Math.floor(Date.now() / 3_600_000);
      for (const unit of ['second', 'hour']) await redis.cli('SET', `tollgate:property-api:category_read.token:{${fp}}:${unit}`, 'old layout');
      await redis.cli('HSET', `tollgate:v1:property-api:category_read.token:{${fp}}:hour`, 'w', '0', 'c', '999');
      await redis.cli('SET', `tollgate:v3:property-api:category_read.token:{${fp}}:hour:${hour}`, 'newer layout');
      expect(await outcome(t, token)).toBe('OK');
      const mine = await redis.cli('--scan', '--pattern', `tollgate:v2:*{${fp}}*`);
      expect(mine.split('\n').filter(Boolean)).toHaveLength(2);
      expect(await redis.cli('HGET', `tollgate:v1:property-api:category_read.token:{${fp}}:hour`, 'c')).toBe('999');
      expect(await redis.cli('GET', `tollgate:v3:property-api:category_read.token:{${fp}}:hour:${hour}`)).toBe('newer layout');
    } finally {
      await t.close();
      await redis.stop();
    }
  });
});
