/** One round of the gRPC port's soak (port-fuzz.test.ts): HTTP/2 abuse at the port (port-attacks.mjs, from an
 * address of its own, each in a process of its own; round 6's in-flight attacks, inflight-attacks.mjs, judge their
 * answers and report what was wrong), RLQS streams (rlqs-round.ts: Envoys and hostile clients), LLM token
 * reservations (a request-phase reservation and a stream-done settlement, examples/llm-budgets.yaml) and a
 * well-behaved in-flight client (inflight-round.ts), all at once. The reservations are judged exactly: once
 * settled, the hour and the month hold the tokens charged. After the round, a never-used tenant is admitted. */
import { spawn } from 'node:child_process';
import { setPriority } from 'node:os';
import { parseMetrics } from '../helpers/metrics.js';
import { RlsClient, type RlsRequest } from '../helpers/service.js';
import { caseRng } from './fuzz-lib.js';
import { freshTenant, stallOnce, wellBehaved } from './inflight-round.js';
import { rlqsRound, streamsClosed } from './rlqs-round.js';
import type { RoundContext } from './soak-lib.js';

/** Round 5's attacks (issue 50) and round 6's (issue 59: in-flight slots, Envoy's timeouts across a stall). */
const ATTACK_NAMES = [
  'gzipBombs',
  'declaredNeverSent',
  'heldStreams',
  'unreadAnswers',
  'rapidReset',
  'rlqsFlood',
  'inventedTenants',
  'countGiveBacks',
  'envoyTimeouts',
];
const HOUR = 1_000_000;
/** A reservation is remembered for its reservation_ttl (10 minutes) after it settles: a few a round keep what the
 * soak's RSS trend measures the port's, not a growing table of records that are meant to be kept. */
const RESERVATIONS_PER_ROUND = 100;
const MONTH = 50_000_000;

interface AttackEnd {
  code: number | null;
  /** What a round 6 attack found wrong (its first 20), and what it did, by kind. */
  problems: string[];
  stats: Record<string, number>;
  notes: string[];
}

/** One attack from its own process and address, for `ms`; its exit code (0: it ran and let go; 3: it was
 * answered wrongly) and what it reported on stdout (a JSON line each). */
function attack(name: string, port: number, ms: number, address: string, tag: string): Promise<AttackEnd> {
  const script = new URL('./port-attacks.mjs', import.meta.url).pathname;
  const child = spawn(process.execPath, [script, name, String(port), String(ms), address, tag], { stdio: ['ignore', 'pipe', 'ignore'] });
  // Lower: an attacker's busy loop would take a core of this 2-core machine from the replica (port-attacks.test.ts).
  if (child.pid) setPriority(child.pid, 10);
  let out = '';
  child.stdout.on('data', (d: Buffer) => {
    if (out.length < 64 * 1024) out += d.toString();
  });
  return new Promise((resolve) =>
    child.on('close', (code) => {
      const end: AttackEnd = { code, problems: [], stats: {}, notes: [] };
      for (const line of out.split('\n').filter(Boolean)) {
        const m = JSON.parse(line) as Partial<AttackEnd> & { problem?: string };
        if (m.problem) end.problems.push(m.problem);
        if (m.stats) end.stats = m.stats;
        if (m.notes) end.notes = m.notes;
      }
      resolve(end);
    }),
  );
}

export async function portRound(ctx: RoundContext, rlqsIntervalMs: number, tenants: string[]): Promise<void> {
  const r = caseRng(ctx.r.int(2 ** 32), 0);
  const names = Array.from({ length: r.between(1, ctx.light ? 1 : 3) }, () => r.pick(ATTACK_NAMES));
  const address = `127.0.3.${2 + (ctx.index % 250)}`;
  // The Envoy-like client is no attacker: an address of its own, not paced for the attackers' connections.
  const from = (n: string) => (n === 'envoyTimeouts' ? `127.0.4.${2 + (ctx.index % 250)}` : address);
  const attacks = names.map((n, i) => attack(n, ctx.target.grpcPort, ctx.ms, from(n), `${ctx.marker}-${ctx.index}-${i}`));
  const stalled = names.includes('envoyTimeouts') ? stallOnce(ctx) : undefined;
  const rlqs = rlqsRound(ctx, rlqsIntervalMs);
  const label = ctx.label;
  const reserved = reservations(ctx, `fuzz-${ctx.index}-${r.int(1e9)}`);
  const inFlight = wellBehaved(ctx, tenants);
  const ends = await Promise.all(attacks);
  const stall = await stalled;
  await Promise.all([rlqs, reserved, inFlight]);
  const notes = ends.flatMap((e) => e.notes);
  ctx.label = `${names.join(' + ')} at the port${notes.length ? ` (${notes.join('; ')})` : ''}; RLQS: ${ctx.label || label}; reservations; in-flight`;
  ctx.count('port attack', names.length);
  if (stall) ctx.wrong.add({ index: ctx.index, kind: 'envoyTimeouts: the service stopped 300 ms', problem: stall });
  for (const [i, end] of ends.entries()) {
    ctx.count(`attack ${names[i]}`);
    for (const [kind, n] of Object.entries(end.stats)) ctx.count(kind, n);
    for (const problem of end.problems) ctx.wrong.add({ index: ctx.index, kind: names[i]!, problem });
    if (end.code !== 0 && end.problems.length === 0) ctx.wrong.add({ index: ctx.index, kind: names[i]!, problem: `the attack process exited ${end.code}` });
  }
  const rls = new RlsClient(ctx.target.grpcPort);
  const locked = await freshTenant(rls, `fresh-${ctx.marker}-${ctx.index}`).catch((err: Error) => err.message);
  rls.close();
  if (locked) ctx.wrong.add({ index: ctx.index, kind: 'stuck slots: a never-used tenant', problem: locked });
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
