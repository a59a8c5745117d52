/** The HTTP port under attack, against the memory store and a real Redis: POST /json and /explain with
 * every shape of body, the admin API with every shape of path and credential, raw bytes. The service must
 * stay up, answer 2xx/4xx as the README says (no 5xx: the store is up), and never let the marker planted
 * in every field out: not in a body, a header, a log line (trace level), /metrics, or a Redis key. */
import { describe, expect, it } from 'vitest';
import {
  budgetFromEnv, explainFailures, FUZZ_BOUNDS, fuzzSeed, LeakScanner, makeMarker, report, runCases, scanAfterRun, startTarget, summarize,
} from './fuzz-lib.js';
import { execHttp, httpAgent, httpCase, type HttpCase } from './http-cases.js';

const { budget, mode, soak } = budgetFromEnv(4000, 12_000, 12);

async function fuzzHttp(store: 'memory' | 'redis'): Promise<void> {
  const seed = fuzzSeed();
  const scanner = new LeakScanner(makeMarker(seed));
  const target = await startTarget(store, mode, scanner);
  const startedAt = Date.now();
  const agent = httpAgent();
  try {
    const tally = await runCases<HttpCase>(
      seed,
      budget,
      (r, index) => httpCase(r, index, scanner.marker, FUZZ_BOUNDS),
      (c, index) => execHttp(agent, target.httpPort, c, index, scanner),
      target.alive,
    );
    if (target.alive()) await scanAfterRun(target, scanner);
    else tally.crashes = 1;
    report(summarize('http', target.name, seed, startedAt, tally, scanner));
    const problems = tally.crashes + tally.wrong.length + tally.hangs.length + scanner.leaks.length;
    expect(problems, explainFailures(`http fuzz, ${target.name}`, seed, tally, scanner)).toBe(0);
    expect(tally.sent).toBeGreaterThan(0);
  } finally {
    agent.destroy();
    await target.close();
  }
}

const timeout = budget.ms + 60_000;

describe.concurrent(`HTTP port under attack (${mode}${soak ? ', soak' : ''})`, () => {
  it('memory store', () => fuzzHttp('memory'), timeout);
  it('Redis store', () => fuzzHttp('redis'), timeout);
});
