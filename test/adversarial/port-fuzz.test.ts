/** The gRPC port's soak (soak-lib.ts: the invariants after each round) against a real `tollgate serve`: HTTP/2
 * abuse and in-flight attacks at random (port-attacks.mjs, inflight-attacks.mjs), RLQS streams, token reservations
 * and a well-behaved in-flight client together each round (port-round.ts); at the end, no slot stuck. In
 * `npm test` a few light rounds keep the harness working; `npm run fuzz -- --only port` runs it as long as it is
 * given, on both servers. FUZZ_SEED replays the same rounds. */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { configDir } from '../helpers/service.js';
import { INFLIGHT_YAML } from './inflight-attacks.mjs';
import { stuckSlots } from './inflight-round.js';
import { portRound, portSettled } from './port-round.js';
import { RLQS_DOMAIN, RLQS_FUZZ_YAML } from './rlqs-judge.js';
import { type SoakSpec, soakBudget } from './soak-lib.js';
import { SoakProcess } from './soak-process.js';
import { soakRun } from './soak-run.js';

const budget = soakBudget(2, [1500, 2000]);
const INTERVAL_MS = 1000;
/** What a round may leave above the idle baseline once settled. Measured (this 2-core machine, 2026-11-28): the
 * port's attacks alone settle 110–140 MiB above it with the V8 heap back at 60–70 MiB and external memory at
 * 10–60 MiB (memory the allocator keeps from HTTP/2 sessions and zlib, level from round to round); RLQS's rounds
 * 45–65 MiB (soak-lib.ts LEAK_GROWTH_MB); both at once 205–215. Round 6's in-flight attacks (2026-12-02) hold
 * state by design for their 24 h leases: up to 50,000 holders (~45 MB live) and the invented tenants' counters;
 * with them the 10-minute soak settled at +246 (http2) and a level +267 (grpc-js, rounds 22–27: the heap back at
 * 80–90 MiB, the rest the allocator's), so the bound is issue 59's target, 300. Streams the port failed to let go
 * (5–9 KB each, 100 a connection) or held bytes not given back (settle checks they are 0) pass this within a few
 * rounds; a slower climb is the trend check's (TREND_MB, from 12 rounds on). */
const SETTLE_MB = 300;

function spec(server: 'http2' | 'grpc-js'): SoakSpec {
  /** The well-behaved in-flight client's tenants, one a round: each must have its whole limit at the end. */
  const tenants: string[] = [];
  return {
    suite: 'port',
    start: (scanner) => {
      const dir = configDir({
        'property-api.yaml': readFileSync('config/property-api.yaml', 'utf8'),
        'rlqs-fuzz.yaml': RLQS_FUZZ_YAML,
        'llm.yaml': readFileSync('examples/llm-budgets.yaml', 'utf8'),
        'inflight-fuzz.yaml': INFLIGHT_YAML,
      });
      const args = ['--config', dir, '--config-poll-ms', '0', '--rlqs-report-interval', `${INTERVAL_MS / 1000}s`, '--grpc-server', server];
      // At info: debug writes a line per decision, and round 6's clients are answered thousands of times a second
      // (an Envoy at 2,000 calls a second, 64-take calls of ~3 KB lines), which no bound of a round's log allows;
      // the log bound is about state changes and refusals, which info keeps.
      return SoakProcess.start(`${server} server`, args, scanner, undefined, { LOG_LEVEL: 'info' });
    },
    round: (ctx) => portRound(ctx, INTERVAL_MS, tenants),
    settle: portSettled,
    known: { domain: RLQS_DOMAIN, key: 'check', limit: 5 },
    probe: { domain: RLQS_DOMAIN, key: 'probe', limit: 1000, exact: true },
    settleMb: SETTLE_MB,
    afterRounds: async (_target, rls, wrong) => {
      for (const problem of await stuckSlots(rls, tenants, `${Date.now()}`)) wrong('stuck slots', problem);
    },
  };
}

describe.sequential(`the gRPC port under HTTP/2 abuse, RLQS streams and reservations (${budget.soak ? 'soak' : 'smoke'})`, () => {
  for (const server of budget.soak ? (['http2', 'grpc-js'] as const) : (['http2'] as const)) {
    it(
      `GRPC_SERVER=${server}`,
      async () => {
        const run = await soakRun(spec(server), budget.soak ? { ...budget, ms: budget.ms / 2 } : budget);
        expect(run.problems, run.message).toBe(0);
        expect(run.summary.rounds).toBeGreaterThan(0);
      },
      budget.ms + 120_000,
    );
  }
});
