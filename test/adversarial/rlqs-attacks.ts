/** The clients of an RLQS fuzz round, each running for the round's time from a loopback address of its own:
 * well-behaved Envoys (the simulated filter of test/helpers/envoy-rlqs.ts) whose answers and summed grants are
 * judged, and hostile clients: streams that never send, malformed, huge and random messages, floods of buckets
 * and reports, many streams from one address, abrupt cancels and connection resets, clients that never read.
 * Nothing here waits by sleeping for the service: a client acts at its own pace and is judged on what came. */
import * as grpc from '@grpc/grpc-js';
import { SimEnvoy } from '../helpers/envoy-rlqs.js';
import type { Rng } from './fuzz-lib.js';
import { judgeAnswers, Reported, RLQS_DOMAIN } from './rlqs-judge.js';
import { frame, RlqsConnection, type RlqsStream, report, usage } from './rlqs-wire.js';
import type { RoundContext } from './soak-lib.js';

const { status } = grpc;

export interface ActorEnv {
  ctx: RoundContext;
  r: Rng;
  port: number;
  /** The loopback address this client connects from (its instance). */
  address: string;
  /** When the round's attack ends. */
  until: number;
  /** The report interval the service was started with. */
  intervalMs: number;
  /** Every connection opened, closed by the round when it ends. */
  conns: RlqsConnection[];
}

export type Actor = (env: ActorEnv) => Promise<void>;

const pause = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export function connect(env: ActorEnv): RlqsConnection {
  const c = new RlqsConnection(env.port, env.address);
  env.conns.push(c);
  return c;
}

/** A domain for a hostile client: mostly the fuzz domain, else the property API, else one nobody configured. */
function domainFor(r: Rng, marker: string): string {
  const roll = r.int(10);
  return roll < 7 ? RLQS_DOMAIN : roll < 9 ? 'property-api' : `${marker}.example`;
}

/** A bucket id a hostile client might send (never `shared-*`, the well-behaved Envoys' contended buckets). */
export function randomBucket(r: Rng, marker: string): Record<string, string | Buffer> {
  switch (r.int(9)) {
    case 0:
      return { tenant: `${marker}-${r.int(1_000_000)}` };
    case 1:
      return { tenant: `t${r.int(50)}` };
    case 2:
      return { [`${marker}${r.int(5)}`]: 'v' };
    case 3:
      return { path: `files/${marker}${r.int(100)}` };
    case 4:
      return { watched: marker };
    case 5:
      return { hourly: `${marker}${r.int(10)}` };
    case 6:
      return { tenant: Buffer.from(r.bytes(r.between(1, 40))) };
    case 7:
      return { category: r.pick(['read', 'write', 'reports']), token: `Bearer ${marker}${r.int(1000)}` };
    default:
      return { tenant: marker, [`extra${r.int(3)}`]: `${marker}x` };
  }
}

/** Judges what a stream got: its status among `allowed` (or none yet, or a refusal by reset), its actions right. */
export function judgeStream(env: ActorEnv, kind: string, s: RlqsStream, allowed: readonly number[], reported?: Reported): void {
  env.ctx.scan('an RLQS status message', s.statusMessage);
  const wrong = (problem: string): void => env.ctx.wrong.add({ index: env.ctx.index, kind: `rlqs ${kind}`, problem });
  if (s.status !== undefined && !allowed.includes(s.status))
    wrong(`ended with ${status[s.status] ?? s.status} "${s.statusMessage.slice(0, 200)}", expected one of ${allowed.map((c) => status[c]).join(', ')}`);
  const problem = reported && judgeAnswers(s.answers, reported);
  if (problem) wrong(problem);
}

/** A well-behaved Envoy: the contended buckets and some of its own, requests at a steady rate, reported each
 * interval; its answers and statuses judged. It stays open (the round reads the grants in force of all of them
 * at one instant, then closes them). */
export function wellBehaved(shared: string[], sims: SimEnvoy[]): Actor {
  return async (env) => {
    const { r, ctx } = env;
    const kind = 'rlqs well-behaved Envoy';
    const sim = new SimEnvoy({ ports: [env.port], localAddress: env.address, domain: RLQS_DOMAIN, reportIntervalMs: env.intervalMs });
    sims.push(sim);
    const reported = new Reported(RLQS_DOMAIN);
    const ids = [...shared.map((v) => ({ tenant: v })), ...Array.from({ length: r.between(0, 5) }, () => ({ tenant: `${ctx.marker}-own${r.int(1000)}` }))];
    const perTick = r.between(1, 4);
    ctx.count(kind);
    while (Date.now() < env.until) {
      for (let i = 0; i < perTick; i++) {
        const id = r.pick(ids);
        reported.add(id);
        sim.request(id);
      }
      await pause(10);
    }
    const problem = judgeAnswers(sim.received as { bucket_action?: unknown[] }[], reported);
    if (problem) ctx.wrong.add({ index: ctx.index, kind, problem });
    for (const [i, code] of sim.statuses.entries()) {
      ctx.scan('an RLQS status message', sim.messages[i] ?? '');
      // Refused past a bound another client filled (streams in all), or drained: never anything else.
      if (![String(status.OK), String(status.RESOURCE_EXHAUSTED)].includes(code ?? ''))
        ctx.wrong.add({ index: ctx.index, kind, problem: `its stream ended with ${code}: ${sim.messages[i]}` });
    }
  };
}

/** Streams that never send a message, over a few connections, held open for the round. */
export const silent: Actor = async (env) => {
  const { r } = env;
  const conns = Array.from({ length: r.between(1, 8) }, () => connect(env));
  const n = r.pick(env.ctx.light ? [1, 10, 100] : [1, 10, 100, 500, 2000]);
  env.ctx.count('rlqs silent streams', n);
  const streams = Array.from({ length: n }, (_, i) => conns[i % conns.length]!.open());
  while (Date.now() < env.until) await pause(50);
  // Held open, ended as silent (OK), or refused at open or after a grace, by whichever status a bound chooses.
  const refusals = [status.OK, status.RESOURCE_EXHAUSTED, status.DEADLINE_EXCEEDED, status.CANCELLED, status.UNAVAILABLE];
  for (const s of streams) judgeStream(env, 'silent stream', s, refusals);
};

/** A flood's reports, encoded once per run: encoding 20,000 usages takes the fuzzer's thread a while, and its
 * time is better spent sending. The ids hold the run's marker and are the same every round. */
const floodBodies = new Map<string, Buffer>();

function floodBody(domain: string, ids: Record<string, string>[], cacheKey: string): Buffer {
  let body = floodBodies.get(cacheKey);
  if (!body) {
    body = frame(
      report(
        domain,
        ids.map((id, i) => usage(id, i % 3)),
      ),
    );
    floodBodies.set(cacheKey, body);
  }
  return body;
}

/** Reports of many buckets, again and again at a random pace (back to back, paced by the server's reading). */
export const flood: Actor = async (env) => {
  const { r, ctx } = env;
  const domain = domainFor(r, ctx.marker);
  const conn = connect(env);
  const n = r.pick(ctx.light ? [1, 2] : [1, 1, 1, 2, 4, 8]);
  const buckets = r.pick(ctx.light ? [100, 1000] : [100, 1000, 10_000, 20_000]);
  const gapMs = r.pick(ctx.light ? [100, 1000] : [0, 10, 100, 1000]);
  const reported = new Reported(domain);
  const streams = Array.from({ length: n }, (_, k) => {
    const ids = Array.from({ length: buckets }, (_, i) => ({ tenant: `${ctx.marker}-f${k}-${i}` }));
    for (const id of ids) reported.add(id);
    return { s: conn.open(), body: floodBody(domain, ids, `${ctx.marker}|${domain}|${k}|${buckets}`) };
  });
  let bytes = 0;
  // 32 MiB a client a round: enough to show a cost that grows with reports, not enough to be the fuzzer's own.
  while (Date.now() < env.until && bytes < 32 * 1024 * 1024) {
    for (const { s, body } of streams) {
      s.decodeEvery = 10;
      if (s.write(body)) bytes += body.length;
    }
    ctx.count('rlqs flood reports', n);
    // Paced by the server's reading, but never past the round: a server that stopped reading is judged by its status.
    await Promise.all(streams.map(({ s }) => s.drained(Math.max(0, env.until - Date.now()))));
    await pause(gapMs);
  }
  for (const { s } of streams) judgeStream(env, 'flood', s, [status.OK, status.RESOURCE_EXHAUSTED], reported);
};

/** docs/rlqs.md "Bounds": streams open at once from one address. */
const MAX_STREAMS_PER_ADDRESS = 64;

/** Up to 80 streams at once from one address, each with a first report: at most 64 are served (docs/rlqs.md). */
export const many: Actor = async (env) => {
  const { r, ctx } = env;
  const conns = Array.from({ length: r.between(1, 4) }, () => connect(env));
  const n = r.between(40, 80);
  ctx.count('rlqs streams from one address', n);
  const reported = new Reported(RLQS_DOMAIN);
  const streams = Array.from({ length: n }, (_, i) => {
    const s = conns[i % conns.length]!.open();
    const id = { tenant: `${ctx.marker}-m${i}` };
    reported.add(id);
    s.write(frame(report(RLQS_DOMAIN, [usage(id)])));
    return s;
  });
  await Promise.all(streams.map((s) => s.whenAnswered(1, Math.max(0, env.until - Date.now()))));
  const served = streams.filter((s) => s.messages > 0 && !s.ended).length;
  if (served > MAX_STREAMS_PER_ADDRESS)
    ctx.wrong.add({ index: ctx.index, kind: 'rlqs streams from one address', problem: `${served} streams served at once from one address` });
  for (const s of streams) judgeStream(env, 'one of many streams', s, [status.OK, status.RESOURCE_EXHAUSTED], reported);
};

/** Streams opened, given a report, then cancelled, reset with their connection, or half-closed (which the
 * service must end with a status once it has answered). */
export const churn: Actor = async (env) => {
  const { r, ctx } = env;
  const n = r.between(5, 60);
  for (let i = 0; i < n && Date.now() < env.until; i++) {
    const domain = domainFor(r, ctx.marker);
    const conn = connect(env);
    const s = conn.open();
    const reported = new Reported(domain);
    const ids = Array.from({ length: r.between(1, 5) }, () => randomBucket(r, ctx.marker));
    for (const id of ids) reported.add(id);
    s.write(
      frame(
        report(
          domain,
          ids.map((id) => usage(id)),
        ),
      ),
    );
    const how = r.pick(['cancel', 'reset', 'half-close', 'goaway'] as const);
    ctx.count(`rlqs ${how}`);
    if (r.chance(0.5)) await s.whenAnswered(1, 1000);
    else await pause(r.int(50));
    if (how === 'cancel') s.cancel();
    else if (how === 'reset') conn.reset();
    else if (how === 'goaway') conn.close();
    else {
      s.end();
      // A client that says it is done gets a status once its answers are written (an end, never a hang).
      if (!(await s.whenClosed(5000))) ctx.wrong.add({ index: ctx.index, kind: 'rlqs half-close', problem: 'no status 5 s after the client ended its stream' });
    }
    judgeStream(env, `stream ${how}`, s, [status.OK, status.RESOURCE_EXHAUSTED, status.INVALID_ARGUMENT], reported);
    conn.close();
  }
};

/** A client that writes reports and never reads an answer. */
export const unread: Actor = async (env) => {
  const { r, ctx } = env;
  const domain = domainFor(r, ctx.marker);
  const s = connect(env).open();
  s.h2.pause();
  const ids = Array.from({ length: r.pick(ctx.light ? [10, 100] : [10, 100, 2000]) }, (_, i) => ({ tenant: `${ctx.marker}-u${i}` }));
  const body = frame(
    report(
      domain,
      ids.map((id) => usage(id)),
    ),
  );
  while (Date.now() < env.until && s.write(body)) {
    ctx.count('rlqs reports never read');
    await s.drained(200);
    await pause(r.pick([0, 20, 200]));
  }
};

/** A valid report sent a few bytes at a time, over the round. */
export const trickle: Actor = async (env) => {
  const { r, ctx } = env;
  const domain = domainFor(r, ctx.marker);
  const s = connect(env).open();
  const ids = Array.from({ length: r.between(1, 20) }, () => randomBucket(r, ctx.marker));
  const reported = new Reported(domain);
  for (const id of ids) reported.add(id);
  const bytes = frame(
    report(
      domain,
      ids.map((id) => usage(id)),
    ),
  );
  const writes = Math.max(1, Math.floor((env.until - Date.now()) / 20));
  const step = Math.max(1, Math.ceil(bytes.length / writes));
  ctx.count('rlqs trickled report');
  for (let at = 0; at < bytes.length && Date.now() < env.until; at += step) {
    s.write(bytes.subarray(at, at + step));
    await pause(20);
  }
  judgeStream(env, 'trickle', s, [status.OK], reported);
};
