// Redis Clusters for the benchmarks: a 3-master one (slots spread by redis-cli) and a 1-master one, every node a
// redis-server of its own on a port whose cluster-bus twin is free too. Every process is ended by bench-lib's
// exit hook however the benchmark ends.
import { execFileSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { start } from './bench-lib.mjs';

/** `run(args)` starts a redis-server (redis-cost.mjs's --pin wraps it in taskset); by default, plainly. */
const plain = (args) => start('redis-server', args, /Ready to accept/);

/** A 3-master Redis Cluster (one redis-server each, no replicas): each master's port, pid and process. */
export async function startCluster(run = plain) {
  const nodes = [];
  for (let i = 0; i < 3; i++) nodes.push(await clusterNode(run));
  const addresses = nodes.map((n) => `127.0.0.1:${n.port}`);
  execFileSync('redis-cli', ['--cluster', 'create', ...addresses, '--cluster-replicas', '0', '--cluster-yes'], { stdio: 'ignore' });
  await clusterOk(nodes.map((n) => n.port));
  return nodes;
}

/** A Cluster of one master holding every slot: the Cluster's own costs without the split of the batches. It
 * announces its address, which a master that never met another leaves empty in CLUSTER SLOTS. */
export async function startSoloCluster(run = plain) {
  const node = await clusterNode(run, ['--cluster-announce-ip', '127.0.0.1']);
  execFileSync('redis-cli', ['-p', String(node.port), 'cluster', 'addslotsrange', '0', '16383'], { stdio: 'ignore' });
  await clusterOk([node.port]);
  return [node];
}

/** The URL Tollgate's --redis-url takes for a Cluster's nodes. */
export const clusterUrl = (nodes) => `redis://${nodes.map((n) => `127.0.0.1:${n.port}`).join(',')}`;

/** A redis-server in cluster mode on a port of its own: its port, pid and process. */
async function clusterNode(run, extra = []) {
  const port = await clusterPort();
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-rcc-'));
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--cluster-enabled', 'yes'];
  const child = await run([...args, ...extra, '--cluster-node-timeout', '2000', '--dir', dir]);
  return { port, pid: child.pid, process: child };
}

/** Waits until every node says cluster_state:ok (10 s at most). */
async function clusterOk(ports) {
  for (const port of ports) {
    for (
      let i = 0;
      i < 100 &&
      !execFileSync('redis-cli', ['-p', String(port), 'cluster', 'info'])
        .toString()
        .includes('cluster_state:ok');
      i++
    )
      await new Promise((r) => setTimeout(r, 100));
  }
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
