/** One RLQS fuzz round: a few well-behaved Envoys sharing contended buckets, beside one to three hostile clients
 * (rlqs-attacks.ts, rlqs-garbage.ts), for the round's time. Then the hostile connections are cut, and once the
 * Envoys' streams are quiet, the grants in force on each contended bucket are read at one instant and summed
 * against the rule's rate: docs/rlqs.md says they never sum past it. */
import { HEADROOM_POOL } from '../../src/counters/fair-share.js';
import type { SimEnvoy } from '../helpers/envoy-rlqs.js';
import { parseMetrics } from '../helpers/metrics.js';
import { caseRng } from './fuzz-lib.js';
import { type Actor, type ActorEnv, churn, flood, many, silent, trickle, unread, wellBehaved } from './rlqs-attacks.js';
import { garbage } from './rlqs-garbage.js';
import { TENANT_RATE } from './rlqs-judge.js';
import type { RlqsConnection } from './rlqs-wire.js';
import type { RoundContext } from './soak-lib.js';

/** Weighted: the cheap and varied ones more often. */
const ATTACKS: Actor[] = [garbage, garbage, garbage, flood, flood, silent, silent, churn, churn, many, unread, trickle];
const ATTACK_NAMES = new Map<Actor, string>([
  [garbage, 'garbage'],
  [flood, 'flood'],
  [silent, 'silent'],
  [churn, 'churn'],
  [many, 'many'],
  [unread, 'unread'],
  [trickle, 'trickle'],
]);

/** FUZZ_ATTACKS=silent,flood narrows the attacks to those named (to reproduce a finding). */
const only = process.env.FUZZ_ATTACKS?.split(',').filter(Boolean);
const pool = only ? ATTACKS.filter((a) => only.includes(ATTACK_NAMES.get(a)!)) : ATTACKS;

export async function rlqsRound(ctx: RoundContext, intervalMs: number): Promise<void> {
  const { r } = ctx;
  const until = Date.now() + ctx.ms;
  const conns: RlqsConnection[] = [];
  const sims: SimEnvoy[] = [];
  // Addresses by pool (1: Envoys, 2: hostile clients), spread over rounds; each client of a round has its own.
  const env = (pool: number, k: number): ActorEnv => ({
    ctx,
    r: caseRng(r.int(2 ** 32), k),
    port: ctx.target.grpcPort,
    address: `127.0.${pool}.${2 + ((ctx.index * 13 + k) % 250)}`,
    until,
    intervalMs,
    conns,
  });
  const shared = ['shared-0', 'shared-1'].slice(0, r.between(1, 2));
  const envoys = Array.from({ length: r.between(0, 3) }, () => wellBehaved(shared, sims));
  const attacks = Array.from({ length: r.between(1, 3) }, () => r.pick(pool));
  ctx.label = `${envoys.length} Envoys + ${attacks.map((a) => ATTACK_NAMES.get(a)).join(' + ')}`;
  try {
    await Promise.all([...envoys.map((a, k) => a(env(1, k))), ...attacks.map((a, k) => a(env(2, k)))]);
    for (const c of conns) c.close();
    if (sims.length > 1) await sumInForce(ctx, sims, shared);
  } finally {
    for (const c of conns) c.close();
    for (const s of sims) s.close();
  }
}

/** Waits (up to 3 s) for a moment when no Envoy has received anything for 300 ms, so no assignment is on its
 * way (loopback, a service no longer under attack), then reads every Envoy's grant in force at that instant. */
async function sumInForce(ctx: RoundContext, sims: SimEnvoy[], shared: string[]): Promise<void> {
  const until = Date.now() + 3000;
  let seen = -1;
  let quietSince = Date.now();
  while (Date.now() < until) {
    const now = sims.reduce((n, s) => n + s.received.length, 0);
    if (now !== seen) {
      seen = now;
      quietSince = Date.now();
    } else if (Date.now() - quietSince >= 300) break;
    await new Promise((res) => setTimeout(res, 20));
  }
  if (Date.now() - quietSince < 300) return; // never quiet: nothing to read at one instant
  ctx.count('rlqs contended buckets summed', shared.length);
  for (const bucket of shared) {
    const rates = sims.map((s) => s.rateInForce({ tenant: bucket }));
    const sum = rates.filter(Number.isFinite).reduce((a, b) => a + b, 0);
    // An ALLOW_ALL (Infinity) is a bucket past a bound, not a share; a share is rounded down, never up. The grants
    // may use the headroom pool beside the limit (docs/rlqs.md step 3): what they are expected to admit is the limit.
    const most = TENANT_RATE * (1 + HEADROOM_POOL);
    if (sum > most + 1e-9)
      ctx.wrong.add({ index: ctx.index, kind: 'rlqs grants in force', problem: `${bucket}: ${rates.join(' + ')} = ${sum}/s over ${most}/s` });
  }
}

/** After a round: every stream the clients opened is gone from the service (the gauges read from the streams). */
export async function streamsClosed(ctx: RoundContext): Promise<string | undefined> {
  const until = Date.now() + 15_000;
  let last = '';
  while (Date.now() < until) {
    const series = await fetch(`http://127.0.0.1:${ctx.target.httpPort}/metrics`, { signal: AbortSignal.timeout(5000) })
      .then(async (res) => parseMetrics(await res.text()))
      .catch(() => new Map([['tollgate_rlqs_streams', Number.NaN]]));
    const streams = series.get('tollgate_rlqs_streams') ?? 0;
    const buckets = series.get('tollgate_rlqs_buckets') ?? 0;
    if (streams === 0 && buckets === 0) return undefined;
    last = `${streams} streams and ${buckets} buckets still held 15 s after every client closed`;
    await new Promise((res) => setTimeout(res, 100));
  }
  return last;
}
