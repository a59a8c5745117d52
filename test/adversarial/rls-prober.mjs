// RLS calls one after another while a fuzz round runs, in a thread of its own: the fuzzer's main thread encodes
// and decodes megabytes of attack, and a call timed on that thread would count the fuzzer's stalls as the
// service's. One connection for the whole run, made before the first round (as Envoy keeps its own). Each call
// is on a fresh value of a known hourly rule, so when `exact` each is its counter's first hit: OK with
// limit − 1 remaining. A plain .mjs file: worker threads do not go through vitest's transform.
import { fileURLToPath } from 'node:url';
import { parentPort, workerData } from 'node:worker_threads';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';

const { port, domain, key, limit, exact, deadlineMs, gapMs } = workerData;
const protoDir = fileURLToPath(new URL('../../proto', import.meta.url));
const def = protoLoader.loadSync('envoy/service/ratelimit/v3/rls.proto', { keepCase: true, longs: Number, defaults: true, includeDirs: [protoDir] });
const Rls = grpc.loadPackageDefinition(def).envoy.service.ratelimit.v3.RateLimitService;
const client = new Rls(`127.0.0.1:${port}`, grpc.credentials.createInsecure());

const OK = 1;
const OVER_LIMIT = 2;

const call = (value) =>
  new Promise((resolve) =>
    client.ShouldRateLimit({ domain, descriptors: [{ entries: [{ key, value }] }] }, { deadline: Date.now() + deadlineMs }, (err, res) =>
      resolve({ err, res }),
    ),
  );

/** Calls until told to stop; what they found. */
async function round(tag, stopped) {
  const latencies = [];
  const found = { wrong: { count: 0, first: [] }, late: { count: 0, first: [] } };
  const add = (list, problem) => {
    list.count++;
    if (list.first.length < 20) list.first.push(problem);
  };
  for (let n = 0; !stopped.now; n++) {
    const started = performance.now();
    const { err, res } = await call(`${tag}-${n}`);
    if (err) {
      add(err.code === grpc.status.DEADLINE_EXCEEDED ? found.late : found.wrong, `${grpc.status[err.code]}: ${err.details}`);
    } else {
      latencies.push(performance.now() - started);
      const s = res.statuses[0];
      const decided = [OK, OVER_LIMIT].includes(res.overall_code) && res.statuses.length === 1;
      if (!decided || (exact && (res.overall_code !== OK || s.limit_remaining !== limit - 1)))
        add(found.wrong, `answered overall_code ${res.overall_code}, remaining ${s?.limit_remaining} (${res.statuses.length} statuses)`);
    }
    await new Promise((r) => setTimeout(r, gapMs));
  }
  return { latencies, ...found };
}

let stopped = { now: true };
let running = Promise.resolve();
parentPort.on('message', async (m) => {
  if (m.type === 'begin') {
    stopped = { now: false };
    const flag = stopped;
    running = round(m.tag, flag).then((result) => parentPort.postMessage({ type: 'result', ...result }));
  } else if (m.type === 'end') {
    stopped.now = true;
  } else if (m.type === 'close') {
    stopped.now = true;
    await running;
    client.close();
    parentPort.close();
  }
});
client.waitForReady(Date.now() + 20_000, (err) => parentPort.postMessage({ type: 'ready', error: err?.message }));
