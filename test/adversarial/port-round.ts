/** One round of the gRPC port's soak (port-fuzz.test.ts): HTTP/2 abuse at the port (port-attacks.mjs, from an
 * address of its own, each in a process of its own), RLQS streams (rlqs-round.ts: Envoys and hostile clients) and
 * LLM token reservations (a request-phase reservation and a stream-done settlement, examples/llm-budgets.yaml), all
 * at once. The reservations are judged exactly: once settled, the hour and the month hold the tokens charged. */
import { spawn } from 'node:child_process';
import { setPriority } from 'node:os';
import { parseMetrics } from '../helpers/metrics.js';
import { RlsClient, type RlsRequest } from '../helpers/service.js';
import { caseRng } from './fuzz-lib.js';
import { rlqsRound, streamsClosed } from './rlqs-round.js';
import type { RoundContext } from './soak-lib.js';

const ATTACK_NAMES = ['gzipBombs', 'declaredNeverSent', 'heldStreams', 'unreadAnswers', 'rapidReset', 'rlqsFlood'];
const HOUR = 1_000_000;
/** A reservation is remembered for its reservation_ttl (10 minutes) after it settles: a few a round keep what the
 * soak's RSS trend measures the port's, not a growing table of records that are meant to be kept. */
const RESERVATIONS_PER_ROUND = 100;
const MONTH = 50_000_000;

/** One attack from its own process and address, for `ms`; its exit code (0: it ran and let go). */
function attack(name: string, port: number, ms: number, address: string): Promise<number | null> {
  const script = new URL('./port-attacks.mjs', import.meta.url).pathname;
  const child = spawn(process.execPath, [script, name, String(port), String(ms), address], { stdio: 'ignore' });
  // Lower: an attacker's busy loop would take a core of this 2-core machine from the replica (port-attacks.test.ts).
  if (child.pid) setPriority(child.pid, 10);
  return new Promise((resolve) => child.on('exit', resolve));
}

export async function portRound(ctx: RoundContext, rlqsIntervalMs: number): Promise<void> {
  const r = caseRng(ctx.r.int(2 ** 32), 0);
  const names = Array.from({ length: r.between(1, ctx.light ? 1 : 3) }, () => r.pick(ATTACK_NAMES));
  const address = `127.0.3.${2 + (ctx.index % 250)}`;
  const attacks = names.map((n) => attack(n, ctx.target.grpcPort, ctx.ms, address));
  const rlqs = rlqsRound(ctx, rlqsIntervalMs);
  const label = ctx.label;
  const reserved = reservations(ctx, `fuzz-${ctx.index}-${r.int(1e9)}`);
  const codes = await Promise.all(attacks);
  await Promise.all([rlqs, reserved]);
  ctx.label = `${names.join(' + ')} at the port; RLQS: ${ctx.label || label}; reservations`;
  ctx.count('port attack', names.length);
  for (const [i, c] of codes.entries()) {
    if (c !== 0) ctx.wrong.add({ index: ctx.index, kind: names[i]!, problem: `the attack process exited ${c}` });
  }
}

/** Requests reserving an estimate and settling to their tokens, one after another for the round; then the hour and
 * the month must hold exactly the tokens settled (every reservation was settled). A round's tenant settles at most
 * 100 requests of at most 300 tokens: within its hour of 1,000,000, so every reservation fits. */
async function reservations(ctx: RoundContext, tenant: string): Promise<void> {
  const rls = new RlsClient(ctx.target.grpcPort, { 'grpc.tollgate.reservations': ctx.index });
  const r = caseRng(ctx.r.int(2 ** 32), 1);
  const until = Date.now() + ctx.ms;
  let charged = 0;
  const call = (descriptors: RlsRequest['descriptors']) => rls.call({ domain: 'llm', descriptors }, 5000);
  const tenantD = (hits: number) => ({ entries: [{ key: 'tenant', value: tenant }], hits_addend: { value: hits } });
  const modelD = (id: string, hits: number) => ({
    entries: [
      { key: 'tenant', value: tenant },
      { key: 'model', value: 'm' },
      { key: 'request_id', value: id },
    ],
    hits_addend: { value: hits },
  });
  try {
    for (let k = 0; k < RESERVATIONS_PER_ROUND && Date.now() < until; k++) {
      const id = `${ctx.marker}-${k}`;
      const ask = await call([tenantD(0), modelD(id, r.between(10, 300))]);
      if (ask.overall_code !== 'OK') throw new Error(`request ${k} reserved nothing: ${ask.overall_code}`);
      const tokens = r.between(0, 300);
      await call([tenantD(tokens), modelD(id, tokens)]);
      charged += tokens;
      ctx.count('reservation');
      // Paced: each decision is a line of the trace log the soak bounds.
      await new Promise((res) => setTimeout(res, 20));
    }
    const check = await call([tenantD(0), modelD(`${ctx.marker}-check`, 0)]);
    const left = check.statuses.map((s) => s.limit_remaining);
    if (left[0] !== MONTH - charged || left[1] !== HOUR - charged)
      ctx.wrong.add({ index: ctx.index, kind: 'reservations', problem: `${charged} tokens settled, remaining ${left.join('/')}` });
  } catch (err) {
    ctx.wrong.add({ index: ctx.index, kind: 'reservations', problem: (err as Error).message });
  } finally {
    rls.close();
  }
}

/** Nothing of the round held after it: RLQS's streams and buckets, and the request bytes the port held. */
export async function portSettled(ctx: RoundContext): Promise<string | undefined> {
  const rlqs = await streamsClosed(ctx);
  if (rlqs) return rlqs;
  const until = Date.now() + 15_000;
  let held = Number.NaN;
  while (Date.now() < until) {
    const text = await fetch(`http://127.0.0.1:${ctx.target.httpPort}/metrics`, { signal: AbortSignal.timeout(5000) }).then(
      (res) => res.text(),
      () => '',
    );
    held = parseMetrics(text).get('tollgate_grpc_request_bytes_held') ?? Number.NaN;
    if (held === 0) return undefined;
    await new Promise((res) => setTimeout(res, 100));
  }
  return `${held} request bytes still held 15 s after the round`;
}
