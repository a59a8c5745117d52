// What a flood does to its neighbours: (A) a well-behaved client's latency on replica B while another replica (A) of
// the same Redis takes in-flight slots for invented tenants at full speed, and (B) a live client's latency while a
// replica replays its settlement queue (give-backs kept while Redis was frozen) once Redis answers again.
// `node bench/flood-neighbours.mjs` from the repository (dist/ built). Every process it starts is ended by PID.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { INFLIGHT_DOMAIN, INFLIGHT_YAML, inventedTenants, TENANT_LIMIT } from '../test/adversarial/inflight-attacks.mjs';
import { connect, descriptor, rlsMessage, unary } from '../test/adversarial/rls-wire.mjs';

const SELF = fileURLToPath(import.meta.url);
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const [RATE, ROUNDS] = [200, 3]; // the well-behaved client's calls a second; rounds, each idle then busy
const [A_PHASE_MS, B_PHASE_MS] = [10_000, 5_000]; // each idle or busy window of part A, of part B
// 156 calls of 64, under the queue's 10,000-descriptor bound: none is dropped, so every slot must come back (checked).
const B_TAKES = 156 * 64;
const CALL_TIMEOUT_MS = 3_000; // a call unanswered this long counts as a failure (no hang on a stuck service)
const CLK_TCK = 100; // /proc's clock ticks a second (getconf CLK_TCK on Linux)
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const fail = (why) => {
  throw new Error(why);
};
process.on('exit', () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) process.kill(c.pid, 'SIGKILL');
}); // a crash too
const children = [];
const freePort = () =>
  new Promise((ok) =>
    createServer().listen(0, '127.0.0.1', function () {
      const { port } = this.address();
      this.close(() => ok(port));
    }),
  );

/** The q-quantile of `xs` (nearest rank), rounded to 0.01 ms. */
function pct(xs, q) {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? Math.round(s[Math.min(s.length - 1, Math.ceil(q * s.length) - 1)] * 100) / 100 : undefined;
}

/** A process's CPU time (user + system) in ms, from /proc: how busy each of the 2 cores' tenants was. */
function pidCpuMs(pid) {
  const f = (() => {
    try {
      return readFileSync(`/proc/${pid}/stat`, 'utf8');
    } catch {
      return '';
    }
  })()
    .split(') ')
    .pop()
    .split(' ');
  return ((Number(f[11]) + Number(f[12])) * 1000) / CLK_TCK;
}

/** Starts a process, resolved once its output matches `ready`. Its output is read to the end (a pipe nobody
 * reads would block its logging), its tail kept for the report if it dies. */
function launch(cmd, args, ready, env = {}) {
  const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
  children.push(child);
  const proc = { pid: child.pid, child, tail: '', exit: undefined };
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${cmd} not ready in 20 s: ${proc.tail}`)), 20_000);
    const onData = (d) => {
      proc.tail = (proc.tail + d).slice(-2000);
      if (proc.exit === undefined && ready.test(proc.tail)) resolve(proc, clearTimeout(timer));
    };
    for (const stream of [child.stdout, child.stderr]) stream.on('data', onData);
    child.once('exit', (code, sig) => {
      proc.exit = code ?? sig;
      clearTimeout(timer);
      reject(new Error(`${cmd} exited ${proc.exit}: ${proc.tail}`));
    });
  });
}

async function startRedis(port) {
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'];
  return Object.assign(await launch('redis-server', args, /Ready to accept/), { port });
}

async function startReplica(redisPort, dir) {
  const [grpc, http] = [await freePort(), await freePort()];
  const args = [join(ROOT, 'dist/cli.js'), 'serve', '--store', 'redis', '--redis-url', `redis://127.0.0.1:${redisPort}`, '--config', dir];
  args.push('--config-poll-ms', '0', '--grpc-host', '127.0.0.1', '--http-host', '127.0.0.1', '--grpc-port', String(grpc), '--http-port', String(http));
  return Object.assign(await launch(process.execPath, args, /tollgate serving/, { LOG_LEVEL: 'info' }), { grpc, http });
}

/** Ends processes by PID: SIGCONT first (a frozen Redis ignores SIGTERM until it runs), SIGKILL after 5 s. */
async function stopAll(procs = children) {
  const live = procs.map((p) => p.child ?? p).filter((c) => c.exitCode === null && c.signalCode === null);
  const gone = live.map((c) => new Promise((r) => c.once('exit', r)));
  for (const c of live)
    for (const sig of ['SIGCONT', 'SIGTERM'])
      try {
        process.kill(c.pid, sig);
      } catch {}
  await Promise.race([Promise.all(gone), sleep(5_000)]);
  for (const c of live)
    if (c.exitCode === null && c.signalCode === null)
      try {
        process.kill(c.pid, 'SIGKILL');
      } catch {}
}

const call = (s, frame) => Promise.race([unary(s, frame), sleep(CALL_TIMEOUT_MS).then(() => ({ status: 'no answer' }))]); // one call, bounded

/** Open loop on one session: RATE calls a second for `ms`, frames pre-encoded, the pace never waiting for answers
 * (a slow answer cannot hide the calls that would have queued behind it). Own CPU and lateness are kept to show
 * the generator was not the bottleneck. */
async function probe(s, frames, ms) {
  const [done, pending] = [[], []];
  let [issued, lateMax] = [0, 0];
  const [cpu0, t0] = [process.cpuUsage(), performance.now()];
  await new Promise((resolve) => {
    const tick = setInterval(() => {
      const now = performance.now();
      const due = Math.min(Math.floor(((now - t0) * RATE) / 1000), (ms * RATE) / 1000);
      if (issued < due) lateMax = Math.max(lateMax, now - t0 - (issued * 1000) / RATE);
      for (; issued < due; issued++) {
        const at = performance.now();
        const p = call(s, frames[issued % frames.length]);
        pending.push(p.then(({ status, answer }) => done.push({ at: at - t0, took: performance.now() - at, status, overall: answer?.overall })));
      }
      if (now - t0 >= ms) resolve(clearInterval(tick));
    }, 5);
  });
  await Promise.all(pending);
  const cpu = process.cpuUsage(cpu0);
  return { done, t0, cpuPct: Math.round(((cpu.user + cpu.system) / 10 / (performance.now() - t0)) * 10) / 10, lateMax };
}

/** p50/p99 of the answered calls of `done` (optionally those issued in [from, to) ms), failures and non-OK. */
function stats(done, from = 0, to = Number.POSITIVE_INFINITY) {
  const inside = done.filter((d) => d.at >= from && d.at < to);
  const ok = inside.filter((d) => d.status === '0');
  const failed = inside.filter((d) => d.status !== '0');
  const kinds = [...new Set(failed.map((d) => d.status))].join(',');
  const lastFailureMs = failed.length ? Math.round(Math.max(...failed.map((d) => d.at))) : undefined;
  const lat = ok.map((d) => d.took);
  const notOk = ok.filter((d) => d.overall !== 1).length;
  return { calls: inside.length, p50: pct(lat, 0.5), p99: pct(lat, 0.99), failures: failed.length, kinds, lastFailureMs, notOk };
}

/** The well-behaved client's requests: plain property-api reads, 1,000 tokens in turn (each well under its
 * 10/s, 1,000/h limits), so every answer should be OK. */
const probeFrames = (tag) =>
  Array.from({ length: 1000 }, (_, i) =>
    rlsMessage('property-api', [
      descriptor([
        ['category', 'read'],
        ['token', `Bearer probe-${tag}-${i}`],
      ]),
    ]),
  );

/** The flood as a process of its own (`--flood PORT MS TAG`), so its work is neither timed nor charged as the
 * probe's: prints { admitted, problems, first }. */
async function floodChild(port, ms, tag) {
  console.log('flooding');
  const [problems, admitted] = [[], []];
  await inventedTenants(port, AbortSignal.timeout(ms), { tag, report: (p) => problems.push(p), stat: (_, n) => admitted.push(n), note: () => undefined });
  console.log(JSON.stringify({ admitted: admitted[0], problems: problems.length, first: problems[0] }));
  process.exit(0);
}

/** The flooder, started (it prints `flooding` first, its report last); its report once it has exited. */
const startFlood = (port, ms, tag) => launch(process.execPath, [SELF, '--flood', String(port), String(ms), tag], /flooding/);
async function floodReport(f) {
  if (f.child.exitCode === null && f.child.signalCode === null) await once(f.child, 'exit');
  return { exit: f.child.exitCode, ...JSON.parse(f.tail.trim().split('\n').pop() || '{}') };
}

/** CPU % of one core used by each process between two readings. */
const cpuPct = (procs, before, ms) => Object.fromEntries(Object.entries(procs).map(([k, p]) => [k, Math.round(((pidCpuMs(p.pid) - before[k]) / ms) * 100)]));
const cpuNow = (procs) => Object.fromEntries(Object.entries(procs).map(([k, p]) => [k, pidCpuMs(p.pid)]));

async function partA(dir) {
  const redis = await startRedis(await freePort());
  const procs = { replicaA: await startReplica(redis.port, dir), replicaB: await startReplica(redis.port, dir), redis };
  const s = (await connect(procs.replicaB.grpc)) ?? fail('no connection to replica B');
  const frames = probeFrames('a');
  await probe(s, frames, 1_000); // warm-up: JIT, the connection, Redis scripts loaded
  const rounds = [];
  for (let r = 0; r < ROUNDS; r++) {
    const idle = await probe(s, frames, A_PHASE_MS);
    const flood = await startFlood(procs.replicaA.grpc, A_PHASE_MS + 1_000, `a${r}`);
    await sleep(200); // the flooder's calls are running before the window opens
    const watched = { ...procs, flooder: flood };
    const before = cpuNow(watched);
    const busy = await probe(s, frames, A_PHASE_MS);
    const cpu = cpuPct(watched, before, performance.now() - busy.t0);
    const f = await floodReport(flood);
    const [i, b] = [stats(idle.done), stats(busy.done)];
    rounds.push({ idle: i, flood: b, ratio: b.p99 / i.p99, probeCpu: [idle.cpuPct, busy.cpuPct], lateMax: Math.max(idle.lateMax, busy.lateMax), cpu, f });
  }
  s.destroy();
  const died = Object.entries(procs)
    .filter(([, p]) => p.exit !== undefined)
    .map(([k, p]) => `${k} exited ${p.exit}: ${p.tail}`);
  await stopAll(Object.values(procs));
  return { rounds, died };
}

/** `entries` in calls of 64 descriptors (`width` at a time on `s`), each made by `make`: every status's count and
 * every answered descriptor's { code, remaining }. */
async function inCalls(s, entries, make, width = 4) {
  const [statuses, answers] = [{}, []];
  let next = 0;
  const worker = async () => {
    while (next < entries.length) {
      const chunk = entries.slice(next, next + 64);
      next += 64;
      const { status, answer } = await call(s, rlsMessage(INFLIGHT_DOMAIN, chunk.map(make)));
      statuses[status] = (statuses[status] ?? 0) + 1;
      if (answer) answers.push(...answer.statuses);
    }
  };
  await Promise.all(Array.from({ length: width }, worker));
  return { statuses, answers };
}

async function metric(http, name) {
  const text = await (await fetch(`http://127.0.0.1:${http}/metrics`, { signal: AbortSignal.timeout(2_000) })).text();
  return Number(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'm').exec(text)?.[1] ?? Number.NaN);
}

/** Polls tollgate_settlements_waiting every 100 ms from `t0` until it reads 0 (or `maxMs`): ms to drain. */
async function drainTime(http, t0, maxMs) {
  let peak = 0;
  while (performance.now() - t0 < maxMs) {
    const n = await metric(http, 'tollgate_settlements_waiting').catch(() => Number.NaN);
    peak = Math.max(peak, n || 0);
    if (n === 0) return { ms: Math.round(performance.now() - t0), peak };
    await sleep(100);
  }
  return { ms: undefined, peak };
}

/** One replay round: idle window, N takes, Redis frozen (SIGSTOP), their give-backs (kept by the replica),
 * SIGCONT, the live client for B_PHASE_MS while the queue drains, then a check that every slot came back. */
async function replayRound(r, redis, c, s, work, frames) {
  const idle = await probe(s, frames, B_PHASE_MS);
  const tenants = Array.from({ length: B_TAKES }, (_, i) => [
    ['tenant', `b${r}-t${i}`],
    ['request_id', `b${r}-q${i}`],
  ]);
  const takes = await inCalls(work, tenants, (e) => descriptor(e));
  const taken = takes.answers.filter((a) => a.code === 1 && a.remaining === TENANT_LIMIT - 1).length;
  process.kill(redis.pid, 'SIGSTOP');
  const frozenAt = performance.now();
  const backs = await inCalls(work, tenants, (e) => descriptor(e, 1, true));
  const kept = await metric(c.http, 'tollgate_settlements_waiting');
  const frozenMs = Math.round(performance.now() - frozenAt);
  process.kill(redis.pid, 'SIGCONT');
  const t0 = performance.now();
  const [live, drain] = await Promise.all([probe(s, frames, B_PHASE_MS), drainTime(c.http, t0, 10_000)]);
  const after = await inCalls(work, tenants, (e) => descriptor(e, 0));
  const stillHeld = B_TAKES - after.answers.filter((a) => a.code === 1 && a.remaining === TENANT_LIMIT).length;
  const [i, l] = [stats(idle.done), stats(live.done)];
  // The calls issued while the queue was still waiting (probe time starts at live.t0, drain time at t0).
  const draining = drain.ms === undefined ? undefined : stats(live.done, 0, drain.ms - (live.t0 - t0));
  const dropped = await metric(c.http, 'tollgate_settlements_dropped');
  return {
    idle: i,
    replay: l,
    draining,
    ratio: l.p99 / i.p99,
    taken,
    takeStatuses: takes.statuses,
    backStatuses: backs.statuses,
    keptCalls: kept,
    frozenMs,
    drain,
    stillHeld,
    dropped,
    probeCpu: [idle.cpuPct, live.cpuPct],
    lateMax: Math.max(idle.lateMax, live.lateMax),
  };
}

async function partB(dir) {
  const redis = await startRedis(await freePort());
  const c = await startReplica(redis.port, dir);
  const [s, work] = [(await connect(c.grpc)) ?? fail('no connection'), (await connect(c.grpc)) ?? fail('no connection')];
  const frames = probeFrames('b');
  await probe(s, frames, 1_000);
  const rounds = [];
  for (let r = 0; r < ROUNDS; r++) rounds.push(await replayRound(r, redis, c, s, work, frames));
  for (const x of [s, work]) x.destroy();
  const died = c.exit !== undefined ? [`replica exited ${c.exit}: ${c.tail}`] : [];
  await stopAll([c, redis]);
  return { rounds, died };
}

const med = (rounds, f) => pct(rounds.map(f).filter(Number.isFinite), 0.5);
const r2 = (x) => (x === undefined ? undefined : Math.round(x * 100) / 100);

function summarize(a, b) {
  const sum = (rounds, f) => rounds.reduce((n, r) => n + f(r), 0);
  const most = (rounds, f) => r2(Math.max(...rounds.flatMap(f)));
  const A = {
    idleP50: med(a.rounds, (r) => r.idle.p50),
    idleP99: med(a.rounds, (r) => r.idle.p99),
    floodP50: med(a.rounds, (r) => r.flood.p50),
    floodP99: med(a.rounds, (r) => r.flood.p99),
    ratioP99: r2(med(a.rounds, (r) => r.ratio)),
    idleFailures: sum(a.rounds, (r) => r.idle.failures),
    floodFailures: sum(a.rounds, (r) => r.flood.failures),
    notOk: sum(a.rounds, (r) => r.idle.notOk + r.flood.notOk),
    floodTakes: med(a.rounds, (r) => r.f.admitted),
    floodProblems: sum(a.rounds, (r) => r.f.problems),
    floodFirstProblem: a.rounds.find((r) => r.f.first)?.f.first,
    probeCpuPct: most(a.rounds, (r) => r.probeCpu),
    probeLateMaxMs: most(a.rounds, (r) => [r.lateMax]),
    cpuPctDuringFlood: Object.fromEntries(['replicaA', 'replicaB', 'redis', 'flooder'].map((k) => [k, med(a.rounds, (r) => r.cpu[k])])),
  };
  const B = {
    idleP50: med(b.rounds, (r) => r.idle.p50),
    idleP99: med(b.rounds, (r) => r.idle.p99),
    replayP50: med(b.rounds, (r) => r.replay.p50),
    replayP99: med(b.rounds, (r) => r.replay.p99),
    whileDrainingP99: med(b.rounds, (r) => r.draining?.p99),
    ratioP99: r2(med(b.rounds, (r) => r.ratio)),
    idleFailures: sum(b.rounds, (r) => r.idle.failures),
    replayFailures: sum(b.rounds, (r) => r.replay.failures),
    replayFailureKinds: [...new Set(b.rounds.map((r) => r.replay.kinds))].join(' '),
    lastFailureMs: most(b.rounds, (r) => [r.replay.lastFailureMs ?? 0]),
    drainMs: med(b.rounds, (r) => r.drain.ms),
    keptCalls: med(b.rounds, (r) => r.keptCalls),
    frozenMs: med(b.rounds, (r) => r.frozenMs),
    takesAdmitted: med(b.rounds, (r) => r.taken),
    stillHeldAfter: sum(b.rounds, (r) => r.stillHeld),
    dropped: most(b.rounds, (r) => [r.dropped]),
    probeCpuPct: most(b.rounds, (r) => r.probeCpu),
    probeLateMaxMs: most(b.rounds, (r) => [r.lateMax]),
  };
  return { A, B };
}

async function main() {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-flood-'));
  copyFileSync(join(ROOT, 'config/property-api.yaml'), join(dir, 'property-api.yaml'));
  writeFileSync(join(dir, 'inflight.yaml'), INFLIGHT_YAML);
  // The whole run is bounded: past 4 minutes everything started is ended and the run fails.
  const watchdog = setTimeout(() => stopAll().then(() => process.exit(2)), 235_000);
  try {
    const [a, b] = [await partA(dir), await partB(dir)];
    const { A, B } = summarize(a, b);
    const rounds = process.argv.includes('--rounds') && { roundsA: a.rounds, roundsB: b.rounds };
    console.log(`${JSON.stringify({ A, B, died: [...a.died, ...b.died], ...rounds }, null, 1)}\n`);
    const row = (...cells) => console.log(`| ${cells.join(' | ')} |`);
    row(`${RATE}/s, one connection, ms, medians of ${ROUNDS}`, 'idle p50', 'idle p99', 'busy p50', 'busy p99', 'p99 ratio', 'failures idle/busy');
    row('---', '---', '---', '---', '---', '---', '---');
    row('A: replica B, flood on A', A.idleP50, A.idleP99, A.floodP50, A.floodP99, A.ratioP99, `${A.idleFailures}/${A.floodFailures}`);
    row('B: 5 s after SIGCONT', B.idleP50, B.idleP99, B.replayP50, B.replayP99, B.ratioP99, `${B.idleFailures}/${B.replayFailures}`);
  } finally {
    clearTimeout(watchdog);
    await stopAll();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[2] === '--flood') await floodChild(Number(process.argv[3]), Number(process.argv[4]), process.argv[5]);
else await main();
