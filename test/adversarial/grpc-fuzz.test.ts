/** A protocol fuzzer for the gRPC port, against the memory store and a real Redis: valid-shaped requests
 * through grpc-js, raw HTTP/2 frames of every broken sort. The service must stay up, answer every call
 * within its deadline as the contract says, and never let the marker planted in every field out: not in
 * an answer, a log line (trace level), /metrics, or a Redis key. FUZZ_SEED replays a run. */
import { describe, expect, it } from 'vitest';
import {
  budgetFromEnv, explainFailures, FUZZ_BOUNDS, fuzzSeed, LeakScanner, makeMarker, report, runCases, scanAfterRun, startTarget, summarize,
} from './fuzz-lib.js';
import { execClient, execRaw, GrpcClientPool, grpcCase, RawSessions, type GrpcCase } from './grpc-cases.js';

const { budget, mode, soak } = budgetFromEnv(4000, 12_000, 16);

async function fuzzGrpc(store: 'memory' | 'redis'): Promise<void> {
  const seed = fuzzSeed();
  const scanner = new LeakScanner(makeMarker(seed));
  const target = await startTarget(store, mode, scanner);
  const startedAt = Date.now();
  const pool = new GrpcClientPool(target.grpcPort, 4);
  const sessions = new RawSessions(target.grpcPort);
  try {
    const tally = await runCases<GrpcCase>(
      seed,
      budget,
      (r, index) => grpcCase(r, index, scanner.marker, FUZZ_BOUNDS),
      (c, index) => (c.via === 'client' ? execClient(pool, c, index, scanner) : execRaw(sessions, c, index, scanner)),
      target.alive,
    );
    if (target.alive()) await scanAfterRun(target, scanner);
    else tally.crashes = 1;
    const summary = summarize('grpc', target.name, seed, startedAt, tally, scanner);
    report(summary);
    const problems = tally.crashes + tally.wrong.length + tally.hangs.length + scanner.leaks.length;
    expect(problems, explainFailures(`grpc fuzz, ${target.name}`, seed, tally, scanner)).toBe(0);
    expect(tally.sent).toBeGreaterThan(0);
  } finally {
    pool.close();
    sessions.close();
    await target.close();
  }
}

const timeout = budget.ms + 60_000;

describe.concurrent(`gRPC port under attack (${mode}${soak ? ', soak' : ''})`, () => {
  it('memory store', () => fuzzGrpc('memory'), timeout);
  it('Redis store', () => fuzzGrpc('redis'), timeout);
});
