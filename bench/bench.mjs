// npm run bench [-- --seconds 10 --rate 5000 --json FILE]
// Measures Tollgate against the floor of its own stack, side by side in one run on this machine:
//   noop     a gRPC server on the same stack that answers OK with three fixed headers (bench/noop-rls.mjs)
//   memory   tollgate serve --store memory
//   redis    tollgate serve --store redis (a redis-server of its own)
// Each is driven by bench/load.mjs in a separate process: at full speed (closed loop), then at a fixed rate.
// Then the memory store's footprint with 1,000,000 distinct tokens (bench/memory.mjs).
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '6' },
    rounds: { type: 'string', default: '3' },
    rate: { type: 'string', default: '5000' },
    json: { type: 'string' },
    profile: { type: 'boolean', default: false },
    'skip-memory': { type: 'boolean', default: false },
  },
});

const freePort = () =>
  new Promise((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });

function start(command, args, ready) {
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  return new Promise((resolve, reject) => {
    const onData = (d) => {
      out += d;
      if (ready.test(out)) resolve(child);
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.once('exit', (code) => reject(new Error(`${command} exited ${code}: ${out}`)));
  });
}

function stop(child) {
  return new Promise((resolve) => {
    if (child.exitCode !== null) return resolve();
    child.once('exit', resolve);
    child.kill('SIGTERM');
    setTimeout(() => child.kill('SIGKILL'), 15_000).unref();
  });
}

function run(args) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['bench/load.mjs', ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.once('exit', (code) => (code === 0 ? resolve(JSON.parse(out.trim().split('\n').pop())) : reject(new Error(`load exited ${code}`))));
  });
}

/** Tollgate's own time per decision (from decoded request to response object), from its histogram. */
async function ownTime(httpPort) {
  const text = await (await fetch(`http://127.0.0.1:${httpPort}/metrics`)).text();
  const read = (name) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1]);
  return (read('tollgate_should_rate_limit_duration_seconds_sum') / read('tollgate_should_rate_limit_duration_seconds_count')) * 1e6;
}

/** Peak resident memory of a process, in MiB. */
function peakRssMiB(pid) {
  const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

/** Commands Tollgate sent to Redis. Commands run inside a script show in commandstats too, so they are left
 * out: a script call counts once, as the one round trip it is. */
const IN_SCRIPT = new Set(['hmget', 'hset', 'pexpire', 'time']);
const BENCH_OWN = new Set(['info', 'config|resetstat', 'flushall']);
function redisCalls(port) {
  const stats = execFileSync('redis-cli', ['-p', String(port), 'INFO', 'commandstats']).toString();
  let calls = 0;
  for (const m of stats.matchAll(/^cmdstat_([a-z|]+):calls=(\d+)/gm)) if (!IN_SCRIPT.has(m[1]) && !BENCH_OWN.has(m[1])) calls += Number(m[2]);
  return calls;
}

async function main() {
  const redisPort = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-bench-'));
  const redis = await start('redis-server', ['--port', String(redisPort), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir], /Ready to accept/);
  const tollgate = (port, http, ...extra) => [
    process.execPath,
    [...(values.profile ? ['--cpu-prof', '--cpu-prof-dir', 'bench/profiles'] : []), 'dist/cli.js', 'serve', '--grpc-port', String(port), '--http-port', String(http), '--grpc-host', '127.0.0.1', '--config-poll-ms', '0', ...extra],
    /tollgate serving/,
  ];
  const targets = {
    noop: (port) => [process.execPath, ['bench/noop-rls.mjs', String(port)], /noop serving/],
    memory: (port, http) => tollgate(port, http),
    redis: (port, http) => tollgate(port, http, '--store', 'redis', '--redis-url', `redis://127.0.0.1:${redisPort}`),
  };

  // Rounds alternate the targets, so a slow spell of this (shared, virtual) machine hits all of them alike;
  // each figure is the median over the rounds.
  const runs = { noop: [], memory: [], redis: [] };
  for (let round = 1; round <= Number(values.rounds); round++) {
    for (const [name, make] of Object.entries(targets)) {
      runs[name].push(await measure(name, make, redisPort));
      console.error(`round ${round} ${name}: ${Math.round(runs[name].at(-1).perSecond)} decisions/s`);
    }
  }
  const results = Object.fromEntries(Object.entries(runs).map(([name, rs]) => [name, summarize(rs)]));
  await stop(redis);
  if (!values['skip-memory']) {
    const out = execFileSync(process.execPath, ['--expose-gc', 'bench/memory.mjs', '1000000']).toString();
    results.memoryStore = JSON.parse(out.trim().split('\n').pop());
  }
  print(results);
  if (values.json) {
    writeFileSync(values.json, `${JSON.stringify({ machine: machine(), seconds: Number(values.seconds), rounds: Number(values.rounds), results }, null, 2)}\n`);
  }
}

async function measure(name, make, redisPort) {
  execFileSync('redis-cli', ['-p', String(redisPort), 'FLUSHALL']);
  const port = await freePort();
  const http = await freePort();
  const [cmd, args, ready] = make(port, http);
  const server = await start(cmd, args, ready);
  execFileSync('redis-cli', ['-p', String(redisPort), 'CONFIG', 'RESETSTAT']);
  const max = await run(['--target', `127.0.0.1:${port}`, '--seconds', values.seconds]);
  const calls = redisCalls(redisPort);
  const steady = await run(['--target', `127.0.0.1:${port}`, '--seconds', values.seconds, '--rate', values.rate]);
  const rss = peakRssMiB(server.pid);
  const own = name === 'noop' ? undefined : await ownTime(http);
  await stop(server);
  return {
    perSecond: max.perSecond,
    p50: max.p50,
    p99: max.p99,
    p999: max.p999,
    errors: max.errors + steady.errors,
    // Over every call of the run, warm-up included, as the counters are.
    redisCommandsPerDecision: name === 'redis' ? calls / max.total : 0,
    rssMiB: rss,
    ownMicrosPerDecision: own,
    steady: { rate: Number(values.rate), achieved: steady.perSecond, p50: steady.p50, p99: steady.p99, p999: steady.p999 },
  };
}

function median(xs) {
  const s = xs.filter((x) => x !== undefined && Number.isFinite(x)).sort((a, b) => a - b);
  return s.length ? s[Math.floor(s.length / 2)] : undefined;
}

function summarize(rs) {
  const pick = (f) => median(rs.map(f));
  return {
    perSecond: pick((r) => r.perSecond),
    perSecondRuns: rs.map((r) => Math.round(r.perSecond)),
    p50: pick((r) => r.p50),
    p99: pick((r) => r.p99),
    p999: pick((r) => r.p999),
    errors: rs.reduce((n, r) => n + r.errors, 0),
    redisCommandsPerDecision: pick((r) => r.redisCommandsPerDecision),
    rssMiB: Math.max(...rs.map((r) => r.rssMiB)),
    ownMicrosPerDecision: pick((r) => r.ownMicrosPerDecision),
    steady: {
      rate: rs[0].steady.rate,
      achieved: pick((r) => r.steady.achieved),
      p50: pick((r) => r.steady.p50),
      p99: pick((r) => r.steady.p99),
      p999: pick((r) => r.steady.p999),
    },
  };
}

function machine() {
  const cpus = readFileSync('/proc/cpuinfo', 'utf8').match(/^model name\s*:\s*(.+)$/m)?.[1];
  return { node: process.version, cores: readFileSync('/proc/cpuinfo', 'utf8').match(/^processor/gm).length, cpu: cpus };
}

function print(r) {
  const floor = r.noop;
  const f = (n, d = 0) => (Number.isFinite(n) ? n.toFixed(d) : '-');
  const ratio = (a, b) => (b ? `${(a / b).toFixed(2)}×` : '-');
  const rows = [
    ['', 'decisions/s', 'vs floor', 'p50 ms', 'p99 ms', 'p99.9 ms', 'own µs/decision', 'redis cmds/decision', 'peak RSS MiB', `p50 / p99 / p99.9 ms at ${values.rate}/s`, 'errors'],
  ];
  for (const name of ['noop', 'memory', 'redis']) {
    const x = r[name];
    rows.push([
      name, f(x.perSecond), ratio(x.perSecond, floor.perSecond), f(x.p50, 2), f(x.p99, 2), f(x.p999, 2), f(x.ownMicrosPerDecision, 1),
      f(x.redisCommandsPerDecision, 2), f(x.rssMiB, 0), `${f(x.steady.p50, 2)} / ${f(x.steady.p99, 2)} / ${f(x.steady.p999, 2)}`, String(x.errors),
    ]);
  }
  const widths = rows[0].map((_, i) => Math.max(...rows.map((row) => row[i].length)));
  const line = (row) => `| ${row.map((c, i) => c.padEnd(widths[i])).join(' | ')} |`;
  console.log(line(rows[0]));
  console.log(`|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`);
  for (const row of rows.slice(1)) console.log(line(row));
  if (r.memoryStore) {
    const m = r.memoryStore;
    console.log(`\nmemory store, ${m.tokens} distinct tokens: ${m.counters} counters, heap +${f(m.heapMiB, 1)} MiB (${f(m.bytesPerCounter)} bytes/counter), RSS ${f(m.rssMiB)} MiB, ${m.evictions} evictions`);
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
