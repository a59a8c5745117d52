/** A protocol fuzzer for the gRPC port, against the memory store and a real Redis: valid-shaped requests
 * through grpc-js, raw HTTP/2 frames of every broken sort. The service must stay up, answer every call
 * within its deadline as the contract says, and never let the marker planted in every field out: not in
 * an answer, a log line (trace level), /metrics, or a Redis key. FUZZ_SEED replays a run. */
import { describe, expect, it } from 'vitest';
import { budgetFromEnv, FUZZ_BOUNDS, fuzzRun } from './fuzz-lib.js';
import { execClient, execRaw, type GrpcCase, GrpcClientPool, grpcCase, RawSessions } from './grpc-cases.js';

const env = budgetFromEnv(4000, 12_000, 16);

async function fuzzGrpc(store: 'memory' | 'redis'): Promise<void> {
  const run = await fuzzRun<GrpcCase>('grpc', store, env, (target, scanner) => {
    const pool = new GrpcClientPool(target.grpcPort, 4);
    const sessions = new RawSessions(target.grpcPort);
    return {
      generate: (r, index) => grpcCase(r, index, scanner.marker, FUZZ_BOUNDS),
      exec: (c, index) => (c.via === 'client' ? execClient(pool, c, index, scanner) : execRaw(sessions, c, index, scanner)),
      close: () => {
        pool.close();
        sessions.close();
      },
    };
  });
  expect(run.problems, run.message).toBe(0);
  expect(run.sent).toBeGreaterThan(0);
}

const timeout = env.budget.ms + 60_000;

describe.concurrent(`gRPC port under attack (${env.mode}${env.soak ? ', soak' : ''})`, () => {
  it('memory store', () => fuzzGrpc('memory'), timeout);
  it('Redis store', () => fuzzGrpc('redis'), timeout);
});
