import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { StoreUnavailableError } from '../../src/errors.js';
import type { CheckResult } from '../../src/limits/check.js';
import type { BatchWindow } from '../../src/store/batch-queues.js';
import { parseRedisUrl } from '../../src/store/redis-connection.js';
import { RedisStore } from '../../src/store/redis-store.js';
import { counterCheck } from '../helpers/checks.js';
import { type RedisServer, startRedis } from '../helpers/redis.js';
import { silentLogger } from '../helpers/service.js';
import { bounded } from '../helpers/time.js';

// REDIS_PIPELINE_WINDOW and REDIS_PIPELINE_LIMIT (src/store/redis-store.ts BatchWindow): requests that arrive in
// different event-loop turns share one script call when a window holds them, as envoyproxy/ratelimit's implicit
// pipelining shares a write; without one, each turn's requests go at its end.

let redis: RedisServer;
let seq = 0;
const stores: RedisStore[] = [];
beforeAll(async () => {
  redis = await startRedis();
}, 30_000);
afterEach(async () => {
  redis.signal('SIGCONT');
  await Promise.all(stores.splice(0).map((s) => s.close()));
});
afterAll(async () => {
  await redis?.stop();
});

async function storeWith(batch: BatchWindow | undefined, timeoutMs = 2000): Promise<RedisStore> {
  const store = new RedisStore({ connection: parseRedisUrl(redis.url, 'single'), timeoutMs, keyPrefix: `bw${++seq}:`, logger: silentLogger, batch });
  stores.push(store);
  expect(await store.waitReady(5000)).toBe(true);
  return store;
}

async function scriptCalls(): Promise<number> {
  return Number(/cmdstat_evalsha:calls=(\d+)/.exec(await redis.cli('INFO', 'commandstats'))?.[1] ?? 0);
}

/** An hour's window: the counts a test reads back never straddle a window's end (a 1 s window did, at times:
 * the 7th of 7 counted from 0 again). */
const HOUR_MS = 3_600_000;

/** `n` checks of one counter, each sent in an event-loop turn of its own. */
async function turnByTurn(store: RedisStore, n: number): Promise<CheckResult[]> {
  const answers: Promise<CheckResult>[] = [];
  for (let i = 0; i < n; i++) {
    answers.push(store.check([counterCheck({ key: 'one', limit: 100, windowMs: HOUR_MS })]));
    await new Promise((r) => setImmediate(r));
  }
  return Promise.all(answers);
}

describe('a batch window for the Redis store', () => {
  it('without one, each event-loop turn is a script call of its own', async () => {
    const store = await storeWith(undefined);
    const before = await scriptCalls();
    await turnByTurn(store, 6);
    expect((await scriptCalls()) - before).toBe(6);
  });

  it('a 10 ms window puts requests of several turns in one call, each decided in turn as if sent alone', async () => {
    const store = await storeWith({ windowMs: 10, limit: 0 });
    const before = await scriptCalls();
    const results = await turnByTurn(store, 6);
    expect((await scriptCalls()) - before).toBeLessThanOrEqual(2); // one, unless a turn took the machine 10 ms
    expect(results.map((r) => r.curr[0])).toEqual([0, 1, 2, 3, 4, 5]);
    expect(results.every((r) => r.admitted)).toBe(true);
  });

  it('a limit sends a queue as soon as it holds that many requests, the rest at the end of the window', async () => {
    const store = await storeWith({ windowMs: 10, limit: 3 });
    const before = await scriptCalls();
    const results = await turnByTurn(store, 7);
    // Three: at the 3rd and 6th request, the 7th at the window's end (a fourth if a turn took the machine 10 ms);
    // without the limit, one or two.
    const calls = (await scriptCalls()) - before;
    expect(calls).toBeGreaterThanOrEqual(3);
    expect(calls).toBeLessThanOrEqual(4);
    expect(results.map((r) => r.curr[0])).toEqual([0, 1, 2, 3, 4, 5, 6]);
  });

  it('closing the store sends what waits for the window, and answers it', async () => {
    const store = await storeWith({ windowMs: 10, limit: 0 });
    const held = [store.check([counterCheck({ key: 'c', limit: 5 })]), store.check([counterCheck({ key: 'c', limit: 5 })])];
    stores.splice(stores.indexOf(store), 1);
    await store.close();
    const results = await bounded(Promise.all(held), 5000, 'the held requests answered');
    expect(results.map((r) => r.admitted)).toEqual([true, true]);
  });

  it('a frozen Redis: held requests fail by their deadline like any other, none waits for ever', async () => {
    const store = await storeWith({ windowMs: 10, limit: 0 }, 50);
    redis.signal('SIGSTOP');
    const held = Array.from({ length: 5 }, () =>
      store.check([counterCheck({ key: 'frozen' })]).then(
        () => 'answered',
        (e: unknown) => e,
      ),
    );
    const outcomes = await bounded(Promise.all(held), 5000, 'the held requests settled');
    for (const o of outcomes) expect(o).toBeInstanceOf(StoreUnavailableError);
  });
});
