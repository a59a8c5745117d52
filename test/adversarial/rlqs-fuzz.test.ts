/** A round-based fuzzer of the RLQS stream (soak-lib.ts: the invariants after each round) against a real
 * `tollgate serve`: well-behaved Envoys beside streams that never send, malformed, huge and random messages,
 * floods of buckets and reports, many streams from one address, cancels and connection resets, clients that
 * never read. In `npm test` it runs a few short rounds against a Redis of its own, so the harness cannot rot;
 * `npm run fuzz` runs it against the memory store and Redis for as long as it is given. FUZZ_SEED replays. */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { startRedis } from '../helpers/redis.js';
import { configDir } from '../helpers/service.js';
import { RLQS_DOMAIN, RLQS_FUZZ_YAML } from './rlqs-judge.js';
import { rlqsRound, streamsClosed } from './rlqs-round.js';
import { checkKnown, type SoakSpec, soakBudget } from './soak-lib.js';
import { SoakProcess } from './soak-process.js';
import { soakRun } from './soak-run.js';

const budget = soakBudget(2, [1000, 1500]);
/** Envoy reports every 5 s; 1 s here, so silent streams end and buckets go idle within a round or two. */
const INTERVAL_MS = 1000;
const KNOWN = { domain: RLQS_DOMAIN, key: 'check', limit: 5 };

function spec(store: 'memory' | 'redis', plant?: (problem: string | undefined) => void): SoakSpec {
  return {
    suite: 'rlqs',
    start: async (scanner) => {
      const dir = configDir({ 'property-api.yaml': readFileSync('config/property-api.yaml', 'utf8'), 'rlqs-fuzz.yaml': RLQS_FUZZ_YAML });
      const redis = store === 'redis' ? await startRedis() : undefined;
      const args = ['--config', dir, '--config-poll-ms', '0', '--rlqs-report-interval', `${INTERVAL_MS / 1000}s`];
      if (redis) args.push('--store', 'redis', '--redis-url', redis.url, '--redis-timeout-ms', '2000', '--redis-key-prefix', 'fuzz:');
      try {
        return await SoakProcess.start(`${store} store`, args, scanner, redis);
      } catch (err) {
        await redis?.stop();
        throw err;
      }
    },
    round: (ctx) => rlqsRound(ctx, INTERVAL_MS),
    settle: streamsClosed,
    known: KNOWN,
    probe: { domain: RLQS_DOMAIN, key: 'probe', limit: 1000, exact: true },
    // The checker must be able to fail: the same calls judged against a limit one higher than the config's.
    afterRounds: plant && (async (_target, rls) => plant(await checkKnown(rls, { ...KNOWN, limit: KNOWN.limit + 1 }, `planted-${Date.now()}`))),
  };
}

const timeout = budget.ms + 120_000;

describe.concurrent(`RLQS streams under attack (${budget.soak ? 'soak' : 'smoke'})`, () => {
  if (budget.soak) {
    it(
      'memory store',
      async () => {
        const run = await soakRun(spec('memory'), budget);
        expect(run.problems, run.message).toBe(0);
      },
      timeout,
    );
  }

  it(
    'Redis store',
    async () => {
      let planted: string | undefined;
      const run = await soakRun(
        spec('redis', (p) => (planted = p)),
        budget,
      );
      expect(run.problems, run.message).toBe(0);
      expect(run.summary.rounds).toBeGreaterThan(0);
      expect(planted).toMatch(/call 1 of 8: .*"remaining":4.*expected.*"remaining":5/);
    },
    timeout,
  );
});
