// Two builds of Tollgate at the same time, for a before/after that this machine's drift cannot blur:
//   npm run bench:paired -- --before DIR [--store memory|redis] [--slices 9] [--seconds 4]
// DIR: another checkout, built. Both serve the same config (one store each; with redis, one redis-server
// for both). In each slice an h2load saturates each of them at once (4 connections × 32 streams, the bench's
// one admitted, counted call), so both see the same machine at the same moment: whatever the drift, it is
// the same for both. Per slice: decisions and CPU µs per decision of each process from /proc; then the median
// of the slices' ratios and how many slices each was ahead in. Ratios only: the two share the machine's two
// cores, so their absolute figures are not those of `npm run bench`.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { configDir, cpuSeconds, freePort, h2load, median, onSupportedNode, serveArgs, start, stop } from './bench-lib.mjs';

const { values } = parseArgs({
  options: {
    before: { type: 'string' },
    store: { type: 'string', default: 'memory' },
    slices: { type: 'string', default: '9' },
    seconds: { type: 'string', default: '4' },
    'this-node': { type: 'boolean', default: false },
  },
});
if (!values.before) throw new Error('--before DIR: the checkout to compare with (built)');
onSupportedNode(values['this-node']);

/** One slice: both driven at once; decisions and CPU seconds of each. */
async function slice(servers) {
  const before = servers.map((s) => cpuSeconds(s.child.pid));
  const runs = await Promise.all(servers.map((s) => h2load(s.target, { seconds: Number(values.seconds) })));
  return servers.map((s, i) => {
    const cpu = cpuSeconds(s.child.pid) - before[i];
    if (runs[i].errors > 0) throw new Error(`${s.name}: ${runs[i].errors} calls failed`);
    return { perSecond: runs[i].perSecond, us: (cpu / runs[i].total) * 1e6 };
  });
}

async function main() {
  let redis;
  const extra = [];
  if (values.store === 'redis') {
    const port = await freePort();
    const dir = mkdtempSync(join(tmpdir(), 'tollgate-paired-'));
    redis = await start('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir], /Ready to accept/);
    extra.push('--store', 'redis', '--redis-url', `redis://127.0.0.1:${port}`);
  }
  const config = configDir();
  const servers = [];
  for (const [name, cli] of [
    ['now', 'dist/cli.js'],
    ['before', join(values.before, 'dist/cli.js')],
  ]) {
    const [port, http] = [await freePort(), await freePort()];
    const child = await start(process.execPath, [...serveArgs(cli, config, port, http), ...extra], /tollgate serving/);
    servers.push({ name, child, target: `127.0.0.1:${port}` });
  }
  await Promise.all(servers.map((s) => h2load(s.target, { requests: 20_000 }))); // warm-up
  const ratios = [];
  const usRatios = [];
  for (let i = 1; i <= Number(values.slices); i++) {
    const [now, before] = await slice(servers);
    ratios.push(now.perSecond / before.perSecond);
    usRatios.push(now.us / before.us);
    console.log(`slice ${i}: now ${Math.round(now.perSecond)}/s ${now.us.toFixed(1)} µs, before ${Math.round(before.perSecond)}/s ${before.us.toFixed(1)} µs`);
  }
  for (const s of servers) await stop(s.child);
  if (redis) await stop(redis);
  const ahead = ratios.filter((r) => r > 1).length;
  console.log(
    `${values.store} store, ${ratios.length} slices of ${values.seconds} s at once: decisions now/before ${median(ratios).toFixed(3)}× ` +
      `(median; now ahead in ${ahead}), CPU µs per decision now/before ${median(usRatios).toFixed(3)}×`,
  );
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
