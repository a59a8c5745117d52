/** The HTTP port under attack, against the memory store and a real Redis: POST /json and /explain with
 * every shape of body, the admin API with every shape of path and credential, raw bytes. The service must
 * stay up, answer 2xx/4xx as docs/operations.md says (no 5xx: the store is up), and never let the marker planted
 * in every field out: not in a body, a header, a log line (trace level), /metrics, or a Redis key. */
import { describe, expect, it } from 'vitest';
import { budgetFromEnv, FUZZ_BOUNDS, fuzzRun } from './fuzz-lib.js';
import { execHttp, type HttpCase, httpAgent, httpCase } from './http-cases.js';

const env = budgetFromEnv(4000, 12_000, 12);

async function fuzzHttp(store: 'memory' | 'redis'): Promise<void> {
  const run = await fuzzRun<HttpCase>('http', store, env, (target, scanner) => {
    const agent = httpAgent();
    return {
      generate: (r, index) => httpCase(r, index, scanner.marker, FUZZ_BOUNDS),
      exec: (c, index) => execHttp(agent, c.admin ? target.adminPort : target.httpPort, c, index, scanner),
      close: () => agent.destroy(),
    };
  });
  expect(run.problems, run.message).toBe(0);
  expect(run.sent).toBeGreaterThan(0);
}

const timeout = env.budget.ms + 60_000;

describe.concurrent(`HTTP port under attack (${env.mode}${env.soak ? ', soak' : ''})`, () => {
  it('memory store', () => fuzzHttp('memory'), timeout);
  it('Redis store', () => fuzzHttp('redis'), timeout);
});
