// Pieces of the benchmark: processes, /proc readings, and the two load drivers.
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { withGrpcPrefix } from '../dist/rls/rls-codec.js';
import { RLS_SERVICE, serviceDefinition } from '../dist/server/proto.js';
import { binDir, PINS, satisfies } from '../scripts/node-lines.mjs';

export const freePort = () =>
  new Promise((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });

/** Measured on a Node line Tollgate supports: on another (this machine's own node may be outside package.json's
 * engines), the calling benchmark runs itself again on the first pinned line (scripts/node-lines.json, the
 * image's), whose every process it then starts; `keep` (--this-node) keeps the node it was started with. */
export function onSupportedNode(keep) {
  if (keep || satisfies(process.version)) return;
  const node = join(binDir(PINS[0].version), 'node');
  console.log(`node ${process.version} is not a supported line: running on ${PINS[0].version} (--this-node to keep it)`);
  process.exit(spawnSync(node, process.argv.slice(1), { stdio: 'inherit' }).status ?? 1);
}

/** The median of the finite values (undefined when there is none). */
export function median(xs) {
  const s = xs.filter((x) => x !== undefined && Number.isFinite(x)).sort((a, b) => a - b);
  return s.length ? s[Math.floor(s.length / 2)] : undefined;
}

/** The bundled config plus the benchmark's own domain (one token under a limit no run reaches). */
export function configDir() {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-bench-config-'));
  for (const f of readdirSync('config')) if (/\.ya?ml$/.test(f)) copyFileSync(join('config', f), join(dir, f));
  copyFileSync('bench/bench-domain.yaml', join(dir, 'bench.yaml'));
  return dir;
}

/** `tollgate serve` of the checkout whose dist/cli.js is `cli`, on loopback ports, the config read once. */
export function serveArgs(cli, config, port, http) {
  const ports = ['--grpc-port', String(port), '--http-port', String(http), '--grpc-host', '127.0.0.1', '--http-host', '127.0.0.1'];
  return [cli, 'serve', '--config', config, ...ports, '--config-poll-ms', '0'];
}

/** Every process the benchmark started, ended when it exits however it exits (an error, a timeout's
 * SIGTERM): none is left running. */
const children = new Set();
process.on('exit', () => {
  for (const c of children) c.kill('SIGKILL');
});
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => process.exit(1));

/** Starts a process and resolves once its output matches `ready`. */
export function start(command, args, ready) {
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  children.add(child);
  child.once('exit', () => children.delete(child));
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

export function stop(child) {
  return new Promise((resolve) => {
    if (child.exitCode !== null) return resolve();
    child.once('exit', resolve);
    child.kill('SIGTERM');
    setTimeout(() => child.kill('SIGKILL'), 15_000).unref();
  });
}

const TICKS = Number(execFileSync('getconf', ['CLK_TCK']).toString().trim()) || 100;

/** CPU seconds (user + system) a process has used, from /proc/<pid>/stat; with `thread`, one of its threads
 * (the main thread's id is the pid): /proc/<pid>/task/<thread>/stat. */
export function cpuSeconds(pid, thread) {
  try {
    const stat = readFileSync(thread === undefined ? `/proc/${pid}/stat` : `/proc/${pid}/task/${thread}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / TICKS;
  } catch {
    return NaN;
  }
}

/** Peak resident memory of a process, in MiB. */
export function peakRssMiB(pid) {
  const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

/** Script calls Redis ran (EVALSHA and EVAL): the round trips that decide. */
export function redisScriptCalls(port) {
  const stats = execFileSync('redis-cli', ['-p', String(port), 'INFO', 'commandstats']).toString();
  let calls = 0;
  for (const m of stats.matchAll(/^cmdstat_(?:evalsha|eval):calls=(\d+)/gm)) calls += Number(m[1]);
  return calls;
}

/** The request every saturation call sends: the bench domain's one token, as one gRPC frame. */
function benchFrame() {
  const body = serviceDefinition(RLS_SERVICE).ShouldRateLimit.requestSerialize({
    domain: 'bench',
    descriptors: [{ entries: [{ key: 'token', value: 'Bearer bench' }] }],
  });
  return withGrpcPrefix(body);
}

/** h2load: 4 connections × 32 streams, for `seconds` or `requests`, at full speed or at `rate` calls a second
 * (then with each call's latency from its log file). Samples its own CPU from /proc while it runs, so a run
 * where the driver, not the target, was saturated can be flagged. */
export async function h2load(target, { seconds, requests, rate }) {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-h2load-'));
  const body = join(dir, 'request.bin');
  const log = join(dir, 'requests.log');
  writeFileSync(body, benchFrame());
  const path = serviceDefinition(RLS_SERVICE).ShouldRateLimit.path;
  const args = [
    '-c',
    '4',
    '-m',
    '32',
    '-t',
    '1',
    '-d',
    body,
    '-H',
    'content-type: application/grpc',
    '-H',
    'te: trailers',
    ...(seconds ? ['-D', String(seconds)] : ['-n', String(requests)]),
  ];
  if (rate) args.push(`--rps=${Math.max(1, Math.round(rate / 4))}`, `--log-file=${log}`);
  args.push(`http://${target}${path}`);
  const child = spawn('h2load', args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (out += d));
  let cpu = 0;
  const sampler = setInterval(() => {
    const c = cpuSeconds(child.pid);
    if (Number.isFinite(c)) cpu = c;
  }, 50);
  const started = process.hrtime.bigint();
  const code = await new Promise((resolve) => child.once('exit', resolve));
  clearInterval(sampler);
  const wall = Number(process.hrtime.bigint() - started) / 1e9;
  if (code !== 0) throw new Error(`h2load exited ${code}: ${out}`);
  const num = (re) => Number(re.exec(out)?.[1] ?? NaN);
  const done = num(/requests: \d+ total, \d+ started, (\d+) done/);
  const ok = num(/(\d+) succeeded/);
  const result = { total: done, errors: done - ok, perSecond: num(/finished in [\d.]+s, ([\d.]+) req\/s/), driverShare: cpu / wall };
  return rate ? { ...result, ...latencies(log) } : result;
}

/** p50, p99 and p99.9 in ms from h2load's per-request log (third column: µs to the end of the response). */
function latencies(file) {
  const us = readFileSync(file, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => Number(l.split('\t')[2]))
    .sort((a, b) => a - b);
  const at = (p) => (us.length ? us[Math.min(us.length - 1, Math.floor(p * us.length))] / 1000 : NaN);
  return { p50: at(0.5), p99: at(0.99), p999: at(0.999) };
}

/** bench/h2-driver.mjs in its own process; resolves with its JSON line. */
export function driver(target, args) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['bench/h2-driver.mjs', '--target', target, ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.once('exit', (code) => (code === 0 ? resolve(JSON.parse(out.trim().split('\n').pop())) : reject(new Error(`driver exited ${code}`))));
  });
}
