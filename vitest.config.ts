import { defineConfig } from 'vitest/config';

/** Tests whose subject is behaviour under time or memory pressure the suite itself would add (a burst
 * against a 25 ms Redis deadline, the longest stall during a large reload, resident memory): they run
 * after the rest, one file at a time, so what they measure is Tollgate and not the other test files. */
const ALONE = [
  'test/adversarial/redis-burst.test.ts',
  'test/adversarial/memory-bound.test.ts',
  'test/integration/heap-trim.test.ts',
  'test/integration/reload.test.ts',
  'test/adversarial/rlqs-frozen-redis.test.ts',
  'test/adversarial/rlqs-bounds.test.ts',
  'test/adversarial/port-attacks.test.ts',
  // RLQS accuracy in real time: Envoy's token buckets refill on the clock, so a busy machine shows as error.
  'test/integration/rlqs-fleet.test.ts',
  'test/integration/rlqs-accuracy.test.ts',
];

/** The RLS tests, run once more with ShouldRateLimit served by grpc-js (GRPC_SERVER=grpc-js, the fallback): the
 * suite runs them on the default, node:http2 (server/hot-path.ts). Services started in the test process read it
 * through test/helpers/service.ts, spawned ones from their environment. */
const RLS_ON_GRPC_JS = [
  'test/integration/client.test.ts',
  'test/integration/bad-input.test.ts',
  'test/integration/error-mapping.test.ts',
  'test/integration/grpc-tls.test.ts',
  'test/integration/shutdown.test.ts',
  'test/integration/tracing.test.ts',
  'test/integration/unchecked.test.ts',
  'test/adversarial/grpc-fuzz.test.ts',
];

/** Two files at a time: most files spend their time waiting on timers, sockets and child processes, so on a
 * 2-core machine (where vitest's default is one worker) two keep the suite well under five minutes (313 s → 202 s
 * measured on 2026-11-25). What is sensitive to a busy machine runs alone, after the rest (ALONE). */
export default defineConfig({
  test: {
    maxWorkers: 2,
    testTimeout: 20_000,
    hookTimeout: 30_000,
    projects: [
      { extends: true, test: { name: 'suite', include: ['test/**/*.test.ts'], exclude: ALONE, sequence: { groupOrder: 0 } } },
      { extends: true, test: { name: 'grpc-js', include: RLS_ON_GRPC_JS, env: { GRPC_SERVER: 'grpc-js' }, sequence: { groupOrder: 0 } } },
      { extends: true, test: { name: 'alone', include: ALONE, fileParallelism: false, sequence: { groupOrder: 1 } } },
    ],
  },
});
