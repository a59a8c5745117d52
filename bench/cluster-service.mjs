// A 3-master Redis Cluster against one Redis, through the service: `tollgate serve` on each in turn, driven by
// bench/h2-driver.mjs (node:http2, frames encoded once) at a fixed number of calls in flight over 5,000 tokens of
// the bench domain (every call admitted and counted). Per target and round: decisions a second, redis-server CPU
// per decision summed over every master, Tollgate's CPU per decision, the driver's CPU share. Rounds alternate
// the order; the ratios are the medians of each round's Cluster against the same round's one Redis.
//   node bench/cluster-service.mjs [--rounds 3] [--seconds 5] [--concurrency 64] [--before DIR]
// --before DIR: another checkout, built: its one Redis and Cluster run in the same rounds, and its ratios are printed too.
// Prints one JSON line last.
import { execFileSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { configDir, cpuSeconds, driver, freePort, median, onSupportedNode, redisScriptCalls, serveArgs, start, stop } from './bench-lib.mjs';
import { clusterUrl, startCluster } from './redis-cluster.mjs';

const { values } = parseArgs({
  options: {
    rounds: { type: 'string', default: '3' },
    seconds: { type: 'string', default: '5' },
    concurrency: { type: 'string', default: '64' },
    before: { type: 'string' },
    'this-node': { type: 'boolean', default: false },
  },
});
onSupportedNode(values['this-node']);

async function main() {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-cs-'));
  const one = await start('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir], /Ready to accept/);
  const cluster = await startCluster();
  const config = configDir();
  const cli = 'dist/cli.js';
  const targets = {
    one: { cli, servers: [{ port, pid: one.pid }], args: ['--redis-url', `redis://127.0.0.1:${port}`] },
    cluster: { cli, servers: cluster, args: ['--redis-type', 'cluster', '--redis-url', clusterUrl(cluster)] },
  };
  if (values.before) {
    const old = join(values.before, 'dist/cli.js');
    targets['one@before'] = { ...targets.one, cli: old };
    targets['cluster@before'] = { ...targets.cluster, cli: old };
  }
  const names = Object.keys(targets);
  const runs = Object.fromEntries(names.map((n) => [n, []]));
  for (let round = 1; round <= Number(values.rounds); round++) {
    for (const name of round % 2 ? names : [...names].reverse()) {
      const r = await measure(config, targets[name]);
      runs[name].push(r);
      console.error(`round ${round} ${name}: ${Math.round(r.perSecond)}/s, redis ${r.redisUs.toFixed(1)} µs, tollgate ${r.serviceUs.toFixed(1)} µs`);
    }
  }
  await Promise.all([one, ...cluster.map((n) => n.process)].map(stop));
  const summary = (name) => Object.fromEntries(Object.keys(runs[name][0]).map((k) => [k, median(runs[name].map((r) => r[k]))]));
  const byRound = (a, b, k) => median(runs[a].map((r, i) => r[k] / runs[b][i][k]));
  const ratios = (suffix) => ({
    redisCpuOverOne: byRound(`cluster${suffix}`, `one${suffix}`, 'redisUs'),
    ratePerOne: byRound(`cluster${suffix}`, `one${suffix}`, 'perSecond'),
    serviceCpuOverOne: byRound(`cluster${suffix}`, `one${suffix}`, 'serviceUs'),
  });
  console.log(
    JSON.stringify({
      concurrency: Number(values.concurrency),
      rounds: Number(values.rounds),
      one: summary('one'),
      cluster: summary('cluster'),
      ...ratios(''),
      before: values.before ? { one: summary('one@before'), cluster: summary('cluster@before'), ...ratios('@before') } : undefined,
    }),
  );
}

/** One target, one round: a fresh Tollgate on emptied Redis servers, the driver's 1 s warm-up, then the run. */
async function measure(config, { cli, servers, args }) {
  for (const s of servers) execFileSync('redis-cli', ['-p', String(s.port), 'FLUSHALL']);
  const [grpc, http] = [await freePort(), await freePort()];
  const service = await start(process.execPath, [...serveArgs(cli, config, grpc, http), '--store', 'redis', ...args], /tollgate serving/);
  const pids = [service.pid, ...servers.map((s) => s.pid)];
  const before = pids.map((p) => cpuSeconds(p));
  const calls = () => servers.reduce((n, s) => n + redisScriptCalls(s.port), 0);
  const callsBefore = calls();
  const scriptBefore = scriptUsec(servers);
  const flags = ['--seconds', values.seconds, '--warmup', '1', '--mix', 'tokens', '--connections', '4', '--concurrency', values.concurrency];
  const run = await driver(`127.0.0.1:${grpc}`, flags);
  // The warm-up second is in the CPU figures too: its decisions are counted in `total`.
  const used = pids.map((p, i) => cpuSeconds(p) - before[i]);
  const scriptCalls = calls() - callsBefore;
  const scriptUs = scriptUsec(servers) - scriptBefore;
  await stop(service);
  const per = (s) => (s / run.total) * 1e6;
  return {
    perSecond: run.perSecond,
    redisUs: per(used.slice(1).reduce((a, b) => a + b, 0)),
    serviceUs: per(used[0]),
    callsPerDecision: scriptCalls / run.total,
    // The scripts' own time (commandstats), against redis-server's CPU: what a call costs outside its script.
    scriptUs: scriptUs / run.total,
    driverShare: run.driverCpuShare,
    errors: run.errors,
    p99: run.p99,
  };
}

/** Microseconds Redis spent running scripts (EVALSHA and EVAL), over every server. */
function scriptUsec(servers) {
  let us = 0;
  for (const s of servers) {
    const stats = execFileSync('redis-cli', ['-p', String(s.port), 'INFO', 'commandstats']).toString();
    for (const m of stats.matchAll(/^cmdstat_(?:evalsha|eval):calls=\d+,usec=(\d+)/gm)) us += Number(m[1]);
  }
  return us;
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
