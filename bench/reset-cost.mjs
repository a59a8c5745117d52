// node bench/reset-cost.mjs [--grpc-server http2|grpc-js] [--rounds N]: what one rapid stream reset, and one
// connection refused by the port's bounds, cost a `tollgate serve` replica in CPU (its own /proc/<pid>/stat, user
// + system), against an idle replica's CPU over the same time (issue 59 item 6). An attacker opens a connection,
// resets streams at once (HEADERS, RST_STREAM) until the replica ends it (GOAWAY past 200), and opens the next;
// past the address's burst of 128 new connections, each is refused as it opens (8 a second). Medians of
// alternating rounds: idle, attack, idle, attack. Run alone: it loads both cores.
import http2 from 'node:http2';
import { parseArgs } from 'node:util';
import { configDir, cpuSeconds, freePort, median, onSupportedNode, serveArgs, start, stop } from './bench-lib.mjs';

const { values } = parseArgs({ options: { 'grpc-server': { type: 'string' }, rounds: { type: 'string' }, 'this-node': { type: 'boolean' } } });
onSupportedNode(values['this-node']);
const server = values['grpc-server'] ?? 'http2';
const rounds = Number(values.rounds ?? 3);
const ROUND_MS = 3000;
const PATH = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';
const GRPC = { ':method': 'POST', 'content-type': 'application/grpc', te: 'trailers', ':path': PATH };

/** One attacker for `ms`: connections of rapid resets, each reopened as the last ends. Counts what it did. */
async function attack(port, ms) {
  const tally = { resets: 0, connections: 0, refused: 0 };
  const until = Date.now() + ms;
  while (Date.now() < until) {
    tally.connections++;
    const s = http2.connect(`http://127.0.0.1:${port}`);
    s.on('error', () => undefined);
    const opened = await new Promise((resolve) => {
      s.once('remoteSettings', () => resolve(true));
      s.once('close', () => resolve(false));
    });
    if (!opened) {
      tally.refused++;
      continue;
    }
    while (!s.closed && !s.destroyed && Date.now() < until) {
      for (let i = 0; i < 50 && !s.closed && !s.destroyed; i++) {
        const req = s.request(GRPC);
        req.on('error', () => undefined);
        req.close(http2.constants.NGHTTP2_CANCEL);
        tally.resets++;
      }
      await new Promise((r) => setImmediate(r));
    }
    s.destroy();
  }
  return tally;
}

/** Connections opened for `ms`, each refused as it opens (the address is past its burst): how many. */
async function refusedOnly(port, ms) {
  let refused = 0;
  const until = Date.now() + ms;
  while (Date.now() < until) {
    const s = http2.connect(`http://127.0.0.1:${port}`);
    s.on('error', () => undefined);
    const opened = await new Promise((resolve) => {
      s.once('remoteSettings', () => resolve(true));
      s.once('close', () => resolve(false));
    });
    s.destroy();
    if (!opened) refused++;
  }
  return refused;
}

/** CPU ms the replica used while `run` ran, less what it uses idle over as long. */
async function costOf(pid, idleMsPerSecond, run) {
  const before = cpuSeconds(pid);
  const t0 = Date.now();
  const result = await run();
  return { used: (cpuSeconds(pid) - before) * 1e3 - (idleMsPerSecond * (Date.now() - t0)) / 1e3, result };
}

const [port, http] = [await freePort(), await freePort()];
const child = await start(process.execPath, [...serveArgs('dist/cli.js', configDir(), port, http), '--grpc-server', server], /tollgate serving/);
const idleBefore = cpuSeconds(child.pid);
await new Promise((res) => setTimeout(res, ROUND_MS));
const idleMs = ((cpuSeconds(child.pid) - idleBefore) * 1e3 * 1000) / ROUND_MS;
// The address's burst of new connections spent, so what follows is refused as it opens.
await attack(port, ROUND_MS);
const perRefused = [];
const perReset = [];
for (let r = 0; r < rounds; r++) {
  const refused = await costOf(child.pid, idleMs, () => refusedOnly(port, ROUND_MS));
  const b = refused.used / Math.max(1, refused.result);
  perRefused.push(b * 1e3);
  const attacked = await costOf(child.pid, idleMs, () => attack(port, ROUND_MS));
  const t = attacked.result;
  perReset.push(((attacked.used - t.refused * b) / Math.max(1, t.resets)) * 1e3);
  console.log(
    `round ${r + 1}: ${refused.result} refused alone, ${refused.used.toFixed(0)} ms CPU; ` +
      `${t.resets} resets on ${t.connections - t.refused} connections (${t.refused} refused), ${attacked.used.toFixed(0)} ms CPU`,
  );
}
console.log(
  `GRPC_SERVER=${server} on node ${process.version}: ${median(perReset)?.toFixed(1)} µs CPU a rapid reset, ` +
    `${median(perRefused)?.toFixed(1)} µs a refused connection (medians of ${rounds} alternating rounds), idle ${idleMs.toFixed(2)} ms CPU a second`,
);
await stop(child);
