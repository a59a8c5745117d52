// npm run bench [-- --seconds 6 --rounds 3 --rate half|N --json FILE --profile --skip-memory --only a,b --this-node
//                   --before DIR]   DIR: another checkout, built; adds its memory and redis as targets
// Tollgate against the floors of its own stack, side by side in one run on this machine:
//   raw-noop  node:http2 answering every call with a response framed once (the limit of Node itself)
//   noop      a grpc-js server with the same protos that decides nothing (the floor of Tollgate's stack)
//   rlf-memory, rlf-redis   the peer a Node team would write: grpc-js and rate-limiter-flexible (bench/rlf-rls.mjs)
//   memory    tollgate serve --store memory
//   redis     tollgate serve --store redis (a redis-server of its own)
//   memory+trace1%, redis+trace1%   the same with TRACING_ENABLED and TRACING_SAMPLING_RATE=0.01, spans sent
//             over OTLP/HTTP to a sink in this process (the calls carry no trace: 1% of them start one)
// Per target and round: a saturation run driven by h2load (nghttp2's C load generator: 4 connections × 32
// streams, every call admitted and counted), a fixed-rate run (h2load --rps; default: half the grpc-js floor's
// saturation rate in the same round; latencies from its per-request log) and the property API's traffic mix
// (5,000 tokens, hot tokens, 429s) driven by bench/h2-driver.mjs (node:http2, frames encoded once, checks
// every grpc-status). CPU of every process from /proc, and how much of the wall time the service's main thread
// was on a CPU (near 100 %: the event loop is the bound, not waiting for Redis or the driver). Rounds alternate
// the targets (the floor first, the others forwards in odd rounds, backwards in even ones); figures are medians
// over rounds, and "vs floor, round by round" is the median of each round's ratio to that round's floor. Then the
// memory store's footprint (bench/memory.mjs), and Tollgate's own cost per decision with the bench limit as a
// fixed window and as a token bucket (bench/own-cost.mjs, alternating, medians over the rounds). Then what Redis
// spends per decision, against the lean floor of the same job (bench/redis-cost.mjs), and a 3-master Cluster against one
// Redis through the service at 64 calls in flight (bench/cluster-service.mjs); --skip-redis-cost leaves both out.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import {
  configDir,
  cpuSeconds,
  driver,
  freePort,
  h2load,
  median,
  onSupportedNode,
  peakRssMiB,
  redisScriptCalls,
  serveArgs,
  start,
  stop,
} from './bench-lib.mjs';

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '6' },
    rounds: { type: 'string', default: '3' },
    rate: { type: 'string', default: 'half' },
    json: { type: 'string' },
    profile: { type: 'boolean', default: false },
    'skip-memory': { type: 'boolean', default: false },
    only: { type: 'string' },
    before: { type: 'string' },
    'sat-only': { type: 'boolean', default: false },
    'skip-redis-cost': { type: 'boolean', default: false },
    'this-node': { type: 'boolean', default: false },
  },
});
onSupportedNode(values['this-node']);
const seconds = Number(values.seconds);

async function main() {
  const redisPort = await freePort();
  const redis = await start(
    'redis-server',
    ['--port', String(redisPort), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', mkdtempSync(join(tmpdir(), 'tollgate-bench-'))],
    /Ready to accept/,
  );
  const config = configDir();
  const tollgate = (port, http, ...extra) => tollgateAt('dist/cli.js', port, http, ...extra);
  const tollgateAt = (cli, port, http, ...extra) => [
    process.execPath,
    [...(values.profile ? ['--cpu-prof', '--cpu-prof-dir', 'bench/profiles'] : []), ...serveArgs(cli, config, port, http), ...extra],
    /tollgate serving/,
  ];
  const targets = {
    'raw-noop': (port) => [process.execPath, ['bench/raw-noop.mjs', String(port)], /raw noop serving/],
    noop: (port) => [process.execPath, ['bench/noop-rls.mjs', String(port)], /noop serving/],
    'rlf-memory': (port) => [process.execPath, ['bench/rlf-rls.mjs', String(port)], /rlf serving/],
    'rlf-redis': (port) => [process.execPath, ['bench/rlf-rls.mjs', String(port), String(redisPort)], /rlf serving/],
    memory: (port, http) => tollgate(port, http),
    redis: (port, http) => tollgate(port, http, '--store', 'redis', '--redis-url', `redis://127.0.0.1:${redisPort}`),
    // Two worker processes (--workers 2). Its CPU column counts the primary only: the workers are not summed.
    'redis-2w': (port, http) => tollgate(port, http, '--store', 'redis', '--redis-url', `redis://127.0.0.1:${redisPort}`, '--workers', '2'),
    'memory+trace1%': (port, http) => tollgate(port, http, ...TRACED),
    'redis+trace1%': (port, http) => tollgate(port, http, '--store', 'redis', '--redis-url', `redis://127.0.0.1:${redisPort}`, ...TRACED),
  };
  const sink = await otlpSink();
  process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT = sink.endpoint; // read by the traced targets' exporter
  if (values.before) {
    const cli = join(values.before, 'dist/cli.js');
    targets['memory@before'] = (port, http) => tollgateAt(cli, port, http);
    targets['redis@before'] = (port, http) => tollgateAt(cli, port, http, '--store', 'redis', '--redis-url', `redis://127.0.0.1:${redisPort}`);
  }
  const names = values.only ? values.only.split(',') : Object.keys(targets).filter((n) => n !== 'redis-2w');
  const runs = Object.fromEntries(names.map((n) => [n, []]));
  for (let round = 1; round <= Number(values.rounds); round++) {
    let rate = values.rate === 'half' ? 5000 : Number(values.rate);
    for (const name of roundOrder(names, round)) {
      const r = await measure(name, targets[name], redis, redisPort, rate);
      if (name === 'noop' && values.rate === 'half') rate = Math.round(r.sat.perSecond / 2);
      runs[name].push(r);
      console.error(
        `round ${round} ${name}: ${Math.round(r.sat.perSecond)}/s, ${(r.sat.serviceUs ?? NaN).toFixed(1)} µs/decision, h2load CPU ` +
          `${(r.sat.driverShare * 100).toFixed(0)}%`,
      );
    }
  }
  await stop(redis);
  sink.close();
  if (sink.spans() > 0) console.error(`OTLP sink: ${sink.spans()} export requests received`);
  const results = Object.fromEntries(names.map((n) => [n, summarize(runs[n])]));
  if (!values['skip-memory']) {
    const out = execFileSync(process.execPath, ['--expose-gc', 'bench/memory.mjs', '1000000']).toString();
    results.memoryStore = JSON.parse(out.trim().split('\n').pop());
  }
  results.ownCost = ownCost(Number(values.rounds));
  if (!values['skip-redis-cost']) {
    results.redisCost = redisCost(Number(values.rounds));
    results.clusterService = clusterService(Number(values.rounds));
  }
  print(results);
  if (values.json)
    writeFileSync(values.json, `${JSON.stringify({ machine: machine(), seconds, rounds: Number(values.rounds), rate: values.rate, results }, null, 2)}\n`);
}

const TRACED = ['--tracing', 'true', '--tracing-sampling-rate', '0.01'];

/** A collector that accepts every OTLP/HTTP export and reads nothing of it. */
async function otlpSink() {
  let exports = 0;
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      exports++;
      res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { endpoint: `http://127.0.0.1:${server.address().port}/v1/traces`, spans: () => exports, close: () => server.close() };
}

/** One target, one round: saturation under h2load, then the fixed rate, then the traffic mix. */
async function measure(name, make, redis, redisPort, rate) {
  execFileSync('redis-cli', ['-p', String(redisPort), 'FLUSHALL']);
  const [port, http] = [await freePort(), await freePort()];
  const [cmd, args, ready] = make(port, http);
  const server = await start(cmd, args, ready);
  const target = `127.0.0.1:${port}`;
  await h2load(target, { requests: 20_000 }); // warm-up: JIT, connections, Redis script cache
  const sat = await withCpu([server, redis], () => h2load(target, { seconds }), redisPort);
  const skipped = { result: { total: 1, perSecond: NaN, errors: 0 }, cpu: [NaN, NaN], mainShare: NaN };
  const steady = values['sat-only'] ? skipped : await withCpu([server, redis], () => h2load(target, { seconds, rate }), redisPort);
  const mix = values['sat-only'] ? skipped.result : await driver(target, ['--seconds', String(seconds), '--mix', 'property']);
  const rss = peakRssMiB(server.pid);
  await stop(server);
  const per = (run, i) => (run.cpu[i] / run.result.total) * 1e6;
  const usesRedis = /^redis(\+|@|$)/.test(name);
  return {
    sat: {
      perSecond: sat.result.perSecond,
      errors: sat.result.errors,
      serviceUs: name === 'redis-2w' ? undefined : per(sat, 0),
      mainShare: sat.mainShare,
      redisUs: usesRedis ? per(sat, 1) : undefined,
      redisCallsPerDecision: usesRedis ? sat.scripts / sat.result.total : undefined,
      driverShare: sat.result.driverShare,
    },
    steady: {
      rate,
      achieved: steady.result.perSecond,
      driverShare: steady.result.driverShare,
      p50: steady.result.p50,
      p99: steady.result.p99,
      p999: steady.result.p999,
      errors: steady.result.errors,
      serviceUs: name === 'redis-2w' ? undefined : per(steady, 0),
      redisUs: usesRedis ? per(steady, 1) : undefined,
    },
    mix: { perSecond: mix.perSecond, errors: mix.errors, driverShare: mix.driverCpuShare },
    rssMiB: rss,
  };
}

/** Runs `fn` and reports the CPU seconds each process used meanwhile, the first process's main thread's share
 * of the wall time (how near one core's worth the event loop ran: the bound of a Node server), and Redis
 * script calls. */
async function withCpu(processes, fn, redisPort) {
  const before = processes.map((p) => cpuSeconds(p.pid));
  const mainBefore = cpuSeconds(processes[0].pid, processes[0].pid);
  const scriptsBefore = redisScriptCalls(redisPort);
  const started = process.hrtime.bigint();
  const result = await fn();
  const wall = Number(process.hrtime.bigint() - started) / 1e9;
  return {
    result,
    cpu: processes.map((p, i) => cpuSeconds(p.pid) - before[i]),
    mainShare: (cpuSeconds(processes[0].pid, processes[0].pid) - mainBefore) / wall,
    scripts: redisScriptCalls(redisPort) - scriptsBefore,
  };
}

/** The targets in the order of a round: the floor first (its rate sets the fixed-rate runs), the others forwards in
 * odd rounds and backwards in even ones, so that no target always runs at the same point of a round while the
 * machine's speed drifts within it. */
function roundOrder(names, round) {
  const rest = names.filter((n) => n !== 'noop');
  const ordered = round % 2 === 1 ? rest : rest.reverse();
  return names.includes('noop') ? ['noop', ...ordered] : ordered;
}

function summarize(rs) {
  const pick = (f) => median(rs.map(f));
  const fields = (part) =>
    Object.fromEntries(Object.keys(rs[0][part]).map((k) => [k, k === 'errors' ? rs.reduce((n, r) => n + r[part][k], 0) : pick((r) => r[part][k])]));
  return {
    sat: fields('sat'),
    steady: fields('steady'),
    mix: fields('mix'),
    rssMiB: Math.max(...rs.map((r) => r.rssMiB)),
    satRuns: rs.map((r) => Math.round(r.sat.perSecond)),
  };
}

function machine() {
  const info = execFileSync('cat', ['/proc/cpuinfo']).toString();
  return { node: process.version, cores: info.match(/^processor/gm).length, cpu: info.match(/^model name\s*:\s*(.+)$/m)?.[1] };
}

/** What Redis spends per decision (bench/redis-cost.mjs): the store's script against the lean floor of the
 * same two-window job, the bench domain's one window, a small batch, and a 3-master Cluster. */
function redisCost(rounds) {
  const out = execFileSync(process.execPath, ['bench/redis-cost.mjs', '--decisions', '100000', '--rounds', String(rounds), '--cluster']).toString();
  return JSON.parse(out.trim().split('\n').pop());
}

/** A 3-master Cluster against one Redis through the service, 64 calls in flight (bench/cluster-service.mjs). */
function clusterService(rounds) {
  const out = execFileSync(process.execPath, ['bench/cluster-service.mjs', '--rounds', String(rounds), '--this-node']).toString();
  return JSON.parse(out.trim().split('\n').pop());
}

/** µs per decision of Tollgate's own code, fixed window against token bucket, alternating. */
function ownCost(rounds) {
  const runs = { fixed_window: [], token_bucket: [] };
  const bytes = [];
  for (let i = 0; i < rounds; i++) {
    for (const algorithm of Object.keys(runs)) {
      const out = execFileSync(process.execPath, ['bench/own-cost.mjs', '300000', algorithm]).toString();
      const run = JSON.parse(out.trim().split('\n').pop());
      runs[algorithm].push(run.usPerDecision);
      if (algorithm === 'fixed_window') bytes.push(run.bytesPerDecision);
    }
  }
  return { fixedWindowUs: median(runs.fixed_window), tokenBucketUs: median(runs.token_bucket), fixedWindowBytes: median(bytes) };
}

function print(r) {
  const floor = r.noop?.sat.perSecond;
  const f = (n, d = 0) => (Number.isFinite(n) ? n.toFixed(d) : '-');
  const ratio = (a) => (floor ? `${(a / floor).toFixed(2)}×` : '-');
  // Each round's target against the same round's floor, then the median: the drift between rounds cancels out.
  const roundRatio = (x) => {
    const m = r.noop && median(x.satRuns.map((v, i) => v / r.noop.satRuns[i]));
    return m === undefined ? '-' : `${m.toFixed(2)}×`;
  };
  const rows = [
    [
      'target',
      'decisions/s',
      'vs grpc floor',
      'vs floor, round by round',
      'CPU µs/decision',
      'main thread busy',
      'redis µs/decision',
      'redis calls/decision',
      'h2load CPU',
      'fixed rate/s',
      'µs/decision at it',
      'p50 / p99 / p99.9 ms',
      'mix decisions/s',
      'errors: sat / rate / mix',
      'peak RSS MiB',
    ],
  ];
  for (const [name, x] of Object.entries(r)) {
    if (name === 'memoryStore' || name === 'ownCost' || name === 'redisCost' || name === 'clusterService') continue;
    const driverNote = x.sat.driverShare > 0.9 ? ' (driver-bound!)' : '';
    rows.push([
      name,
      f(x.sat.perSecond),
      ratio(x.sat.perSecond),
      roundRatio(x),
      f(x.sat.serviceUs, 1),
      `${f(x.sat.mainShare * 100)}%`,
      f(x.sat.redisUs, 1),
      f(x.sat.redisCallsPerDecision, 3),
      `${f(x.sat.driverShare * 100)}%${driverNote}`,
      f(x.steady.rate),
      f(x.steady.serviceUs, 1),
      `${f(x.steady.p50, 2)} / ${f(x.steady.p99, 2)} / ${f(x.steady.p999, 2)}`,
      f(x.mix.perSecond),
      `${x.sat.errors} / ${x.steady.errors} / ${x.mix.errors}`,
      f(x.rssMiB),
    ]);
  }
  const widths = rows[0].map((_, i) => Math.max(...rows.map((row) => row[i].length)));
  const line = (row) => `| ${row.map((c, i) => c.padEnd(widths[i])).join(' | ')} |`;
  console.log(line(rows[0]));
  console.log(`|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`);
  for (const row of rows.slice(1)) console.log(line(row));
  if (r.ownCost) {
    const { fixedWindowUs: a, tokenBucketUs: b, fixedWindowBytes: bytes } = r.ownCost;
    console.log(
      `\nown cost per decision (bench/own-cost.mjs): fixed window ${f(a, 2)} µs, token bucket ${f(b, 2)} µs ` +
        `(${b >= a ? '+' : ''}${f(((b - a) / a) * 100, 1)}%); ${f(bytes)} bytes allocated per fixed-window decision`,
    );
  }
  if (r.redisCost) {
    const c = r.redisCost;
    console.log(
      `\nredis-server per decision (bench/redis-cost.mjs, ${c.decisions} decisions a variant, batches of ${c.batch}, ${c.tokens} tokens, median of ` +
        `${c.rounds}):`,
    );
    for (const [name, x] of Object.entries(c.results)) {
      const each = x.perServer.length > 1 ? ` (${x.perServer.map((y) => f(y, 1)).join(' / ')} on each master)` : '';
      console.log(
        `  ${name.padEnd(34)} ${f(x.redisUsPerDecision, 2)} µs (${f(x.spread[0], 1)}–${f(x.spread[1], 1)})${each}, ${f(x.scriptUsPerDecision, 2)} µs ` +
          `in the script, ${f(x.commandsPerDecision, 2)} commands, ${f(x.scriptCallsPerDecision, 3)} script calls`,
      );
    }
    console.log(`  tollgate over the lean floor: ${f(c.tollgateOverFloor, 2)}×`);
    if (c.quietOverFloor) console.log(`  a quiet sidecar (one request a call) over the lean floor at one a call: ${f(c.quietOverFloor, 2)}×`);
    const paced = c.pacedLatencyMs ?? {};
    const p99 = (name) => paced[name]?.[1];
    if (paced['cluster 10'] && paced['cluster 1'])
      console.log(
        `  10 descriptors against 1 on the Cluster at 1,000/s, p99: ${f(p99('cluster 10'), 2)} against ${f(p99('cluster 1'), 2)} ms ` +
          `(${f(p99('cluster 10') / p99('cluster 1'), 2)}×); this machine's floor, a call to 3 masters at once against 1: ` +
          `${f(p99('fan-out 3'), 2)} against ${f(p99('fan-out 1'), 2)} ms (${f(p99('fan-out 3') / p99('fan-out 1'), 2)}×)`,
      );
    if (c.clusterOverOne)
      console.log(
        `  3-master Cluster over one Redis, all masters' CPU: ${f(c.clusterOverOne, 2)}× (one replica's batches), ` +
          `${f(c.clusterOverOneBusy, 2)}× (several replicas' at once), ` +
          `${f(c.clusterOverOneFlowing, 2)}× (128 always in flight); ` +
          `keys ${c.keysPerMaster.join(' / ')}; of which a third of each batch per call ${f(c.thirdBatchOverOne, 2)}×, ` +
          `cluster mode at that size ${f(c.clusterModeOverOne, 2)}×`,
      );
  }
  if (r.clusterService) {
    const { one, cluster, concurrency, redisCpuOverOne, ratePerOne, serviceCpuOverOne } = r.clusterService;
    console.log(
      `\n3-master Cluster through the service (bench/cluster-service.mjs, ${concurrency} calls in flight, 5,000 tokens), against one Redis, ` +
        `round by round: Redis CPU a decision ${f(redisCpuOverOne, 2)}× (${f(cluster.redisUs, 1)} against ${f(one.redisUs, 1)} µs), decisions a second ` +
        `${f(ratePerOne, 2)}× (${f(cluster.perSecond)} against ${f(one.perSecond)}), Tollgate's CPU a decision ${f(serviceCpuOverOne, 2)}×; ` +
        `script calls a decision ${f(cluster.callsPerDecision, 3)} against ${f(one.callsPerDecision, 3)}`,
    );
  }
  if (r.memoryStore) {
    const m = r.memoryStore;
    console.log(
      `\nmemory store, ${m.tokens} distinct tokens: ${m.counters} counters, heap +${f(m.heapMiB, 1)} MiB (${f(m.bytesPerCounter)} bytes/counter), ` +
        `RSS ${f(m.rssMiB)} MiB, ${m.evictions} evictions`,
    );
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
