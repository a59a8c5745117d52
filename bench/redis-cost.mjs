// What Redis spends per decision: redis-server CPU (from /proc) and Redis commands (INFO commandstats, which
// counts the commands a script runs) per decision, for Tollgate's store and for the lean floor of the same
// job (bench/lean-floor.lua), in the same run on the same redis-server, alternating, medians over rounds.
//   node bench/redis-cost.mjs [--decisions N] [--rounds R] [--batch B] [--tokens T] [--cluster] [--replicas R] [--pin] [--sidecar] [--only REGEX]
// Load: batches of B decisions (default 63, what one event-loop turn carries at saturation) over T tokens
// (default 5,000, hot tokens first), each decision two fixed windows (10 a second, 1,000 an hour: the
// property API's read limits), through RedisStore.check as the limiter calls it; and the same shape through
// the bundled `bench` domain's one window; and two windows at batches of 8 and 1 (lightly loaded replicas:
// a sidecar deciding a few hundred requests a second sends most of them alone).
// --cluster: also a 3-master Redis Cluster (one redis-server each), alternating with one Redis in the same
// rounds: redis-server CPU per decision over all masters, and how the counters spread over them; both once with
// one replica's batches (a Redis that waits for them) and once with R replicas' at a time (--replicas, default 4:
// Redis never idle, as at the capacity plan's load); and the two parts of its figure: one Redis at a third of the
// batch, and a 1-master Cluster at that size (cluster mode's own cost); then both with 128 decisions always in
// flight through one store, each answer sending the next (the store's own batching decides the calls' sizes, as
// under h2load's 4 × 32 streams). --sidecar: a sidecar's 2,000 decisions a second, each in a turn of its own,
// without a batch window and with REDIS_PIPELINE_WINDOW=2ms. Prints one JSON line.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { counterId, counterKeyOf, windowKey } from '../dist/counters/keys.js';
import { fingerprint } from '../dist/fingerprint.js';
import { parseRedisUrl } from '../dist/store/redis-connection.js';
import { RedisStore } from '../dist/store/redis-store.js';
import { cpuSeconds, freePort, start, stop } from './bench-lib.mjs';
import { clusterUrl, startCluster, startSoloCluster } from './redis-cluster.mjs';

const { values } = parseArgs({
  options: {
    decisions: { type: 'string', default: '150000' },
    rounds: { type: 'string', default: '3' },
    batch: { type: 'string', default: '63' },
    tokens: { type: 'string', default: '5000' },
    cluster: { type: 'boolean', default: false },
    replicas: { type: 'string', default: '4' },
    pin: { type: 'boolean', default: false },
    sidecar: { type: 'boolean', default: false },
    only: { type: 'string' },
  },
});
// --pin: this process on CPU 0, every redis-server on CPU 1 (taskset), so that one Redis and three masters run
// on the same core under the same conditions, and the client's work does not land on theirs.
if (values.pin) execFileSync('taskset', ['-p', '-c', '0', String(process.pid)], { stdio: 'ignore' });
const startRedis = (args) =>
  values.pin ? start('taskset', ['-c', '1', 'redis-server', ...args], /Ready to accept/) : start('redis-server', args, /Ready to accept/);
const [N, ROUNDS, BATCH, TOKENS] = [values.decisions, values.rounds, values.batch, values.tokens].map(Number);
/** What one of a 3-master Cluster's masters gets of each batch. */
const THIRD = Math.max(1, Math.round(BATCH / 3));
/** Decisions of a --sidecar variant: 5 s at 2,000 a second. */
const SIDECAR_N = 10_000;

const fps = Array.from({ length: TOKENS }, (_, i) => fingerprint(`Bearer token-${i}`));
/** Skewed like real traffic: a quarter of the calls from 1% of the tokens. */
const pick = (i) => (i % 4 === 0 ? fps[i % Math.max(1, Math.floor(TOKENS / 100))] : fps[(i * 7919) % TOKENS]);
const id = counterId('property-api', 'category_read.token');
const window = (fp, unit, ms, limit) => ({
  key: windowKey(counterKeyOf(id, fp), unit),
  windowMs: ms,
  limit,
  hits: 1,
  kind: 0, // a fixed window (src/store/algorithms/algorithm.ts FIXED)
  burst: 0,
  group: 0,
  shadow: false,
  quota: false,
  charge: false,
  calendar: 0,
});
// Limits no run reaches: every decision is admitted and counts both windows, in both variants alike (with the
// property API's 10 a second, how many pass depends on how fast each variant runs).
const twoWindows = (fp) => [window(fp, 'second', 1000, 1_000_000_000), window(fp, 'hour', 3_600_000, 4_000_000_000)];
const oneWindow = (fp) => [{ ...window(fp, 'hour', 3_600_000, 4_000_000_000), key: windowKey(counterKeyOf(counterId('bench', 'token'), fp), 'hour') }];

/** A Redis store as the benchmark's variants use it, ready: `batch` is its batch window (REDIS_PIPELINE_WINDOW). */
async function benchStore(url, type = 'single', batch = undefined) {
  const store = new RedisStore({ connection: parseRedisUrl(url, type), timeoutMs: 2000, keyPrefix: 'bench:', logger: pino({ level: 'silent' }), batch });
  await store.waitReady(5000);
  return store;
}

/** N decisions through RedisStore.check in batches of `batch`, from `replicas` stores at once (each its own
 * connection, sending its next batch when its last is answered, as a replica's turns do): 1 is a replica whose
 * Redis waits for it; more is a Redis that is never idle, as masters are at the capacity plan's load. */
async function tollgate(url, shape, batch = BATCH, type = 'single', replicas = 1) {
  const stores = await Promise.all(Array.from({ length: replicas }, () => benchStore(url, type)));
  let admitted = 0;
  let next = 0;
  const loop = async (store) => {
    while (next < N) {
      const from = next;
      next += batch;
      const calls = [];
      for (let j = 0; j < batch; j++) calls.push(store.check(shape(pick(from + j))));
      for (const r of await Promise.all(calls)) if (r.admitted) admitted++;
    }
  };
  await Promise.all(stores.map(loop));
  await Promise.all(stores.map((s) => s.close()));
  return admitted;
}

/** N decisions through one store with `inFlight` of them always waiting, each answer sending the next, as h2load's
 * streams (4 × 32) reach a saturated replica: how the store itself batches them (per event-loop turn) decides the
 * calls' sizes, not this driver. */
async function flowing(url, shape, type = 'single', inFlight = 128) {
  const store = await benchStore(url, type);
  let admitted = 0;
  let next = 0;
  await new Promise((resolve, reject) => {
    let open = 0;
    const one = () => {
      const i = next++;
      open++;
      store.check(shape(pick(i))).then((r) => {
        if (r.admitted) admitted++;
        open--;
        if (next < N) one();
        else if (open === 0) resolve();
      }, reject);
    };
    for (let j = 0; j < inFlight && next < N; j++) one();
  });
  await store.close();
  return admitted;
}

/** A sidecar's load: `n` decisions at `rate` a second, every millisecond's share each in an event-loop turn of
 * its own (a lightly loaded replica reads its requests one by one), through one store whose batch window is
 * `windowMs` (REDIS_PIPELINE_WINDOW). Also returns the decisions' latencies, p50 and p99 in ms. */
async function paced(url, windowMs, rate, n, type = 'single', build = twoWindows, name = windowMs) {
  const store = await benchStore(url, type, { windowMs, limit: 0 });
  const answers = [];
  const latencies = [];
  let sent = 0;
  await new Promise((resolve) => {
    const tick = setInterval(async () => {
      for (let k = 0; k < rate / 1000 && sent < n; k++) {
        const at = performance.now();
        const answered = (r) => {
          latencies.push(performance.now() - at);
          return r.admitted;
        };
        answers.push(store.check(build(sent++)).then(answered));
        await new Promise((r) => setImmediate(r));
      }
      if (sent >= n) {
        clearInterval(tick);
        resolve();
      }
    }, 1);
  });
  const admitted = (await Promise.all(answers)).filter(Boolean).length;
  await store.close();
  latencies.sort((a, b) => a - b);
  pacedLatency[name] = [latencies[latencies.length >> 1], latencies[Math.floor(latencies.length * 0.99)]];
  return admitted;
}
/** The floor of a request over `masters` masters on this machine: at `rate` a second, one trivial script call
 * (EVAL "return 1") to each of that many masters at once, on connections of their own, timed until the last reply. */
async function fanOut(nodes, masters, rate, n) {
  const conns = nodes.slice(0, masters).map((x) => new Redis({ port: x.port, host: '127.0.0.1' }));
  await Promise.all(conns.map((c) => c.ping()));
  const latencies = [];
  let sent = 0;
  const pending = [];
  await new Promise((resolve) => {
    const tick = setInterval(() => {
      for (let k = 0; k < rate / 1000 && sent < n; k++, sent++) {
        const at = performance.now();
        pending.push(Promise.all(conns.map((c) => c.eval('return 1', 0))).then(() => latencies.push(performance.now() - at)));
      }
      if (sent >= n) {
        clearInterval(tick);
        resolve();
      }
    }, 1);
  });
  await Promise.all(pending);
  for (const c of conns) c.disconnect();
  latencies.sort((a, b) => a - b);
  pacedLatency[`fan-out ${masters}`] = [latencies[latencies.length >> 1], latencies[Math.floor(latencies.length * 0.99)]];
  return n;
}

/** The last paced run's p50 and p99 by window. */
const pacedLatency = {};

const LEAN = readFileSync(new URL('./lean-floor.lua', import.meta.url), 'utf8');
async function lean(port, batch = BATCH) {
  const client = new Redis({ port, host: '127.0.0.1', lazyConnect: false });
  const sha = await client.script('LOAD', LEAN);
  let admitted = 0;
  for (let done = 0; done < N; done += batch) {
    const keys = [];
    for (let j = 0; j < batch; j++) for (const w of twoWindows(pick(done + j))) keys.push(`lean:${w.key}`);
    const r = await client.evalsha(sha, keys.length, ...keys, 0, 1_000_000_000, 4_000_000_000);
    for (const x of r) admitted += x;
  }
  client.disconnect();
  return admitted;
}

function commands(port) {
  return new Promise((resolve, reject) => {
    const c = new Redis({ port, host: '127.0.0.1' });
    c.info('commandstats').then((text) => {
      c.disconnect();
      let total = 0;
      let scriptUs = 0;
      const by = {};
      for (const m of text.matchAll(/^cmdstat_([a-z|]+):calls=(\d+),usec=(\d+)/gm)) {
        if (/^(info|flushall|config\|resetstat|script\|load|ping|hello|quit|client.*|select|cluster.*|command.*)$/.test(m[1])) continue;
        by[m[1]] = Number(m[2]);
        if (m[1] !== 'evalsha' && m[1] !== 'eval') total += Number(m[2]);
        else scriptUs += Number(m[3]);
      }
      resolve({ total, by, scriptUs });
    }, reject);
  });
}

/** One variant's run on these servers (one Redis, or a Cluster's masters): their CPU and commands, summed. */
async function round(servers, name, run, n = N) {
  for (const { port } of servers) {
    const admin = new Redis({ port, host: '127.0.0.1' });
    await admin.flushall();
    await admin.config('RESETSTAT');
    admin.disconnect();
  }
  const cpu0 = servers.map((x) => cpuSeconds(x.pid));
  const admitted = await run();
  const cpu = servers.map((x, i) => cpuSeconds(x.pid) - cpu0[i]);
  const stats = await Promise.all(servers.map((x) => commands(x.port)));
  const by = {};
  for (const st of stats) for (const [k, v] of Object.entries(st.by)) by[k] = (by[k] ?? 0) + v;
  const total = stats.reduce((a, st) => a + st.total, 0);
  return {
    name,
    usPerDecision: (cpu.reduce((a, b) => a + b, 0) / n) * 1e6,
    // Time inside the script calls (commandstats), without reading, parsing and writing them: the part of a
    // decision's cost that stays when a busy Redis serves many calls per wake-up.
    scriptUsPerDecision: stats.reduce((a, st) => a + st.scriptUs, 0) / n,
    usPerDecisionPerServer: cpu.map((c) => (c / n) * 1e6),
    commandsPerDecision: total / n,
    scriptCallsPerDecision: ((by.evalsha ?? 0) + (by.eval ?? 0)) / n,
    admittedShare: admitted / n,
    by,
  };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function main() {
  const port = await freePort();
  const redis = await startRedis(
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', mkdtempSync(join(tmpdir(), 'tollgate-rc-'))],
    /Ready to accept/,
  );
  const one = [{ port, pid: redis.pid }];
  const url = `redis://127.0.0.1:${port}`;
  const variants = {
    'tollgate 2 windows': [one, () => tollgate(url, twoWindows)],
    'lean floor 2 windows': [one, () => lean(port)],
    'tollgate 1 window (bench domain)': [one, () => tollgate(url, oneWindow)],
    'tollgate 2 windows, batch 8': [one, () => tollgate(url, twoWindows, 8)],
    'tollgate 2 windows, batch 1': [one, () => tollgate(url, twoWindows, 1)],
    // The quiet sidecar's floor: the same lean script, one request a call.
    'lean floor 2 windows, batch 1': [one, () => lean(port, 1)],
  };
  // --sidecar: 2,000 decisions a second from one store, with no batch window and with 2 ms (REDIS_PIPELINE_WINDOW).
  if (values.sidecar)
    for (const ms of [0, 2])
      variants[`sidecar 2,000/s, window ${ms} ms`] = [one, () => paced(url, ms, 2000, SIDECAR_N, 'single', (i) => twoWindows(pick(i))), SIDECAR_N];
  const cluster = values.cluster ? await startCluster(startRedis) : undefined;
  const solo = values.cluster ? await startSoloCluster(startRedis) : undefined;
  if (cluster) {
    const curl = clusterUrl(cluster);
    const R = Number(values.replicas);
    variants['cluster 2 windows'] = [cluster, () => tollgate(curl, twoWindows, BATCH, 'cluster')];
    // What the Cluster's figure is made of: a master gets a third of each batch (one Redis at B/3), and runs in
    // cluster mode (a 1-master Cluster at B/3, which checks every command's slot).
    variants[`tollgate 2 windows, batch ${THIRD}`] = [one, () => tollgate(url, twoWindows, THIRD)];
    variants[`1-master cluster, batch ${THIRD}`] = [solo, () => tollgate(`redis://127.0.0.1:${solo[0].port}`, twoWindows, THIRD, 'cluster')];
    variants[`tollgate 2 windows, ${R} replicas`] = [one, () => tollgate(url, twoWindows, BATCH, 'single', R)];
    variants[`cluster 2 windows, ${R} replicas`] = [cluster, () => tollgate(curl, twoWindows, BATCH, 'cluster', R)];
    // The store batching by itself, 128 decisions always waiting (as h2load's 4 × 32 streams keep a replica busy).
    variants['tollgate 2 windows, 128 in flight'] = [one, () => flowing(url, twoWindows)];
    variants['cluster 2 windows, 128 in flight'] = [cluster, () => flowing(curl, twoWindows, 'cluster')];
    // envoyproxy/ratelimit's #1041: a request of 10 descriptors (10 tenants' hourly windows, so 10 hash tags,
    // most on other masters) against one descriptor, at the same 1,000 requests a second: p50 and p99.
    // What this machine gives any request over three masters: three calls at once, against one.
    for (const m of [1, 3])
      variants[`cluster descriptor floor: ${m} master${m > 1 ? 's' : ''} at once`] = [cluster, () => fanOut(cluster, m, 1000, SIDECAR_N), SIDECAR_N];
    for (const d of [1, 10]) {
      const build = (i) => Array.from({ length: d }, (_, j) => ({ ...window(pick(i * d + j), 'hour', 3_600_000, 4_000_000_000), group: j }));
      variants[`cluster ${d} descriptor${d > 1 ? 's' : ''}, 1,000/s`] = [
        cluster,
        () => paced(curl, 0, 1000, SIDECAR_N, 'cluster', build, `cluster ${d}`),
        SIDECAR_N,
      ];
    }
  }
  const runs = {};
  // --only REGEX: the variants whose names match (the ratios of the others are then left out).
  const chosen = Object.entries(variants).filter(([name]) => !values.only || new RegExp(values.only).test(name));
  for (let r = 0; r < ROUNDS; r++) {
    for (const [name, [servers, run, n]] of chosen) {
      runs[name] ??= [];
      runs[name].push(await round(servers, name, run, n));
    }
  }
  const keysPerMaster = cluster?.map((n) =>
    Number(
      execFileSync('redis-cli', ['-p', String(n.port), 'DBSIZE'])
        .toString()
        .trim(),
    ),
  );
  await Promise.all([redis, ...(cluster ?? []), ...(solo ?? [])].map((n) => stop(n.process ?? n)));
  const out = {};
  for (const [name, rs] of Object.entries(runs)) {
    out[name] = {
      redisUsPerDecision: median(rs.map((x) => x.usPerDecision)),
      spread: [Math.min(...rs.map((x) => x.usPerDecision)), Math.max(...rs.map((x) => x.usPerDecision))],
      scriptUsPerDecision: median(rs.map((x) => x.scriptUsPerDecision)),
      perServer: rs.find((x) => x.usPerDecision === median(rs.map((y) => y.usPerDecision))).usPerDecisionPerServer,
      commandsPerDecision: median(rs.map((x) => x.commandsPerDecision)),
      scriptCallsPerDecision: median(rs.map((x) => x.scriptCallsPerDecision)),
      admittedShare: median(rs.map((x) => x.admittedShare)),
      commands: rs.at(-1).by,
    };
  }
  const ratio = (a, b) => out[a] && out[b] && out[a].redisUsPerDecision / out[b].redisUsPerDecision;
  const R = values.replicas;
  console.log(
    JSON.stringify({
      decisions: N,
      batch: BATCH,
      tokens: TOKENS,
      rounds: ROUNDS,
      tollgateOverFloor: ratio('tollgate 2 windows', 'lean floor 2 windows'),
      quietOverFloor: ratio('tollgate 2 windows, batch 1', 'lean floor 2 windows, batch 1'),
      clusterOverOne: ratio('cluster 2 windows', 'tollgate 2 windows'),
      clusterOverOneBusy: ratio(`cluster 2 windows, ${R} replicas`, `tollgate 2 windows, ${R} replicas`),
      clusterOverOneFlowing: ratio('cluster 2 windows, 128 in flight', 'tollgate 2 windows, 128 in flight'),
      // The Cluster's figure in two factors: a third of each batch per call, and cluster mode at that size.
      thirdBatchOverOne: ratio(`tollgate 2 windows, batch ${THIRD}`, 'tollgate 2 windows'),
      clusterModeOverOne: ratio(`1-master cluster, batch ${THIRD}`, `tollgate 2 windows, batch ${THIRD}`),
      keysPerMaster,
      pacedLatencyMs: Object.keys(pacedLatency).length > 0 ? pacedLatency : undefined,
      results: out,
    }),
  );
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
