// What Redis spends per decision: redis-server CPU (from /proc) and Redis commands (INFO commandstats, which
// counts the commands a script runs) per decision, for Tollgate's store and for the lean floor of the same
// job (bench/lean-floor.lua), in the same run on the same redis-server, alternating, medians over rounds.
//   node bench/redis-cost.mjs [--decisions N] [--rounds R] [--batch B] [--tokens T] [--cluster]
// Load: batches of B decisions (default 63, what one event-loop turn carries at saturation) over T tokens
// (default 5,000, hot tokens first), each decision two fixed windows (10 a second, 1,000 an hour: the
// property API's read limits), through RedisStore.check as the limiter calls it; and the same shape through
// the bundled `bench` domain's one window; and two windows at batches of 8 and 1 (lightly loaded replicas:
// a sidecar deciding a few hundred requests a second sends most of them alone).
// --cluster: also a 3-master Redis Cluster (one redis-server each): redis-server CPU per decision on each
// master, and how the counters spread over them. Prints one JSON line.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
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

const { values } = parseArgs({
  options: {
    decisions: { type: 'string', default: '150000' },
    rounds: { type: 'string', default: '3' },
    batch: { type: 'string', default: '63' },
    tokens: { type: 'string', default: '5000' },
    cluster: { type: 'boolean', default: false },
  },
});
const [N, ROUNDS, BATCH, TOKENS] = [values.decisions, values.rounds, values.batch, values.tokens].map(Number);

const fps = Array.from({ length: TOKENS }, (_, i) => fingerprint(`Bearer token-${i}`));
/** Skewed like real traffic: a quarter of the calls from 1% of the tokens. */
const pick = (i) => (i % 4 === 0 ? fps[i % Math.max(1, Math.floor(TOKENS / 100))] : fps[(i * 7919) % TOKENS]);
const id = counterId('property-api', 'category_read.token');
const window = (fp, unit, ms, limit) => ({
  key: windowKey(counterKeyOf(id, fp), unit),
  windowMs: ms,
  limit,
  hits: 1,
  sliding: false,
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

async function tollgate(url, shape, batch = BATCH, type = 'single') {
  const store = new RedisStore({ connection: parseRedisUrl(url, type), timeoutMs: 2000, keyPrefix: 'bench:', logger: pino({ level: 'silent' }) });
  await store.waitReady(5000);
  let admitted = 0;
  for (let done = 0; done < N; done += batch) {
    const calls = [];
    for (let j = 0; j < batch; j++) calls.push(store.check(shape(pick(done + j))));
    for (const r of await Promise.all(calls)) if (r.admitted) admitted++;
  }
  await store.close();
  return admitted;
}

const LEAN = readFileSync(new URL('./lean-floor.lua', import.meta.url), 'utf8');
async function lean(port) {
  const client = new Redis({ port, host: '127.0.0.1', lazyConnect: false });
  const sha = await client.script('LOAD', LEAN);
  let admitted = 0;
  for (let done = 0; done < N; done += BATCH) {
    const keys = [];
    for (let j = 0; j < BATCH; j++) for (const w of twoWindows(pick(done + j))) keys.push(`lean:${w.key}`);
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
      const by = {};
      for (const m of text.matchAll(/^cmdstat_([a-z|]+):calls=(\d+)/gm)) {
        if (/^(info|flushall|config\|resetstat|script\|load|ping|hello|quit|client.*|select)$/.test(m[1])) continue;
        by[m[1]] = Number(m[2]);
        if (m[1] !== 'evalsha' && m[1] !== 'eval') total += Number(m[2]);
      }
      resolve({ total, by });
    }, reject);
  });
}

async function round(port, redisPid, name, run) {
  const admin = new Redis({ port, host: '127.0.0.1' });
  await admin.flushall();
  await admin.config('RESETSTAT');
  admin.disconnect();
  const cpu0 = cpuSeconds(redisPid);
  const admitted = await run();
  const cpu = cpuSeconds(redisPid) - cpu0;
  const { total, by } = await commands(port);
  return {
    name,
    usPerDecision: (cpu / N) * 1e6,
    commandsPerDecision: total / N,
    scriptCallsPerDecision: ((by.evalsha ?? 0) + (by.eval ?? 0)) / N,
    admittedShare: admitted / N,
    by,
  };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function main() {
  const port = values.port ? Number(values.port) : await freePort();
  const redis = await start(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', mkdtempSync(join(tmpdir(), 'tollgate-rc-'))],
    /Ready to accept/,
  );
  const url = `redis://127.0.0.1:${port}`;
  const variants = {
    'tollgate 2 windows': () => tollgate(url, twoWindows),
    'lean floor 2 windows': () => lean(port),
    'tollgate 1 window (bench domain)': () => tollgate(url, oneWindow),
    'tollgate 2 windows, batch 8': () => tollgate(url, twoWindows, 8),
    'tollgate 2 windows, batch 1': () => tollgate(url, twoWindows, 1),
  };
  const runs = {};
  for (let r = 0; r < ROUNDS; r++) {
    for (const [name, run] of Object.entries(variants)) {
      runs[name] ??= [];
      runs[name].push(await round(port, redis.pid, name, run));
    }
  }
  await stop(redis);
  const out = {};
  for (const [name, rs] of Object.entries(runs)) {
    out[name] = {
      redisUsPerDecision: median(rs.map((x) => x.usPerDecision)),
      spread: [Math.min(...rs.map((x) => x.usPerDecision)), Math.max(...rs.map((x) => x.usPerDecision))],
      commandsPerDecision: median(rs.map((x) => x.commandsPerDecision)),
      scriptCallsPerDecision: median(rs.map((x) => x.scriptCallsPerDecision)),
      admittedShare: median(rs.map((x) => x.admittedShare)),
      commands: rs.at(-1).by,
    };
  }
  const t = out['tollgate 2 windows'].redisUsPerDecision;
  const f = out['lean floor 2 windows'].redisUsPerDecision;
  const cluster = values.cluster ? await clusterRun() : undefined;
  console.log(JSON.stringify({ decisions: N, batch: BATCH, tokens: TOKENS, rounds: ROUNDS, tollgateOverFloor: t / f, results: out, cluster }));
}

/** Two windows per decision on a 3-master Cluster: CPU per decision on each master, keys on each. */
async function clusterRun() {
  const ports = [];
  const nodes = [];
  for (let i = 0; i < 3; i++) {
    const p = await clusterPort();
    ports.push(p);
    nodes.push(
      await start(
        'redis-server',
        [
          '--port',
          String(p),
          '--bind',
          '127.0.0.1',
          '--save',
          '',
          '--appendonly',
          'no',
          '--cluster-enabled',
          'yes',
          '--cluster-node-timeout',
          '2000',
          '--dir',
          mkdtempSync(join(tmpdir(), 'tollgate-rcc-')),
        ],
        /Ready to accept/,
      ),
    );
  }
  execFileSync('redis-cli', ['--cluster', 'create', ...ports.map((p) => `127.0.0.1:${p}`), '--cluster-replicas', '0', '--cluster-yes'], { stdio: 'ignore' });
  for (const p of ports) {
    for (
      let i = 0;
      i < 100 &&
      !execFileSync('redis-cli', ['-p', String(p), 'cluster', 'info'])
        .toString()
        .includes('cluster_state:ok');
      i++
    )
      await new Promise((r) => setTimeout(r, 100));
  }
  const cpu0 = nodes.map((n) => cpuSeconds(n.pid));
  await tollgate(`redis://${ports.map((p) => `127.0.0.1:${p}`).join(',')}`, twoWindows, BATCH, 'cluster');
  const perMaster = nodes.map((n, i) => ((cpuSeconds(n.pid) - cpu0[i]) / N) * 1e6);
  const keys = ports.map((p) =>
    Number(
      execFileSync('redis-cli', ['-p', String(p), 'DBSIZE'])
        .toString()
        .trim(),
    ),
  );
  await Promise.all(nodes.map(stop));
  return { redisUsPerDecisionPerMaster: perMaster, redisUsPerDecisionTotal: perMaster.reduce((a, b) => a + b, 0), keysPerMaster: keys };
}

/** A port whose cluster-bus twin (port + 10000) is free too. */
async function clusterPort() {
  for (;;) {
    const p = 20000 + Math.floor(Math.random() * 20000);
    if ((await free(p)) && (await free(p + 10000))) return p;
  }
}

function free(port) {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
