// Load generator, run as its own process: a few HTTP/2 connections carrying many concurrent streams, with
// requests encoded once up front, as Envoy does. Prints one JSON line of results.
//   node bench/load.mjs --target 127.0.0.1:8081 --seconds 10 [--rate 5000] [--connections 4] [--concurrency 256]
import * as grpc from '@grpc/grpc-js';
import { parseArgs } from 'node:util';
import { RLS_SERVICE, serviceDefinition } from '../dist/server/proto.js';

const { values } = parseArgs({
  options: {
    target: { type: 'string' },
    seconds: { type: 'string', default: '10' },
    warmup: { type: 'string', default: '2' },
    rate: { type: 'string' },
    connections: { type: 'string', default: '4' },
    concurrency: { type: 'string', default: '64' },
    tokens: { type: 'string', default: '5000' },
    'hot-tokens': { type: 'string', default: '20' },
    'hot-share': { type: 'string', default: '0.2' },
    unique: { type: 'string' },
  },
});

const method = serviceDefinition(RLS_SERVICE).ShouldRateLimit;
const path = method.path;
const identity = (b) => b;

/** The traffic: 70% read, 20% write, 10% reports; `hot-share` of it from a few hot tokens that run far over
 * their limits, the rest spread over thousands of tokens. --unique N: N requests, each a new token. */
function buildRequests() {
  const encode = (category, token) =>
    method.requestSerialize({
      domain: 'property-api',
      descriptors: [{ entries: [{ key: 'category', value: category }, { key: 'token', value: `Bearer ${token}` }] }],
      hits_addend: 0,
    });
  if (values.unique) {
    return Array.from({ length: Number(values.unique) }, (_, i) => encode('read', `unique-${i}-${process.pid}`));
  }
  const out = [];
  const tokens = Number(values.tokens);
  const hot = Number(values['hot-tokens']);
  let seed = 42;
  const random = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
  for (let i = 0; i < 50_000; i++) {
    const r = random();
    const category = r < 0.7 ? 'read' : r < 0.9 ? 'write' : 'reports';
    const token = random() < Number(values['hot-share']) ? `hot-${Math.floor(random() * hot)}` : `client-${Math.floor(random() * tokens)}`;
    out.push(encode(category, token));
  }
  return out;
}

const requests = buildRequests();
const clients = Array.from({ length: Number(values.connections) }, (_, i) =>
  // A distinct channel option per client forces a connection each.
  new grpc.Client(values.target, grpc.credentials.createInsecure(), { 'grpc.bench_connection': i, 'grpc.max_concurrent_streams': 1000 }),
);

let next = 0;
function call(onDone) {
  const body = requests[next++ % requests.length];
  const client = clients[next % clients.length];
  client.makeUnaryRequest(path, identity, identity, body, { deadline: Date.now() + 5000 }, onDone);
}

const latencies = new Float64Array(4_000_000);
let recorded = 0;
let errors = 0;
let total = 0;
let measuring = false;

function record(startNs, err) {
  total++;
  if (!measuring) return;
  if (err) errors++;
  else if (recorded < latencies.length) latencies[recorded++] = Number(process.hrtime.bigint() - startNs) / 1e6;
}

/** As many as `concurrency` calls in flight at all times. */
function closedLoop(stop) {
  const workers = [];
  for (let w = 0; w < Number(values.concurrency); w++) {
    workers.push(
      new Promise((resolve) => {
        const loop = () => {
          if (stop()) return resolve();
          const start = process.hrtime.bigint();
          call((err) => {
            record(start, err);
            loop();
          });
        };
        loop();
      }),
    );
  }
  return Promise.all(workers);
}

/** `rate` calls a second on a fixed schedule (batches every millisecond), whatever the answers do: a slow
 * server cannot slow the sender down (open loop). Latency counts from the moment each call is sent; the
 * achieved rate shows whether the schedule was kept. */
function openLoop(rate, stop) {
  return new Promise((resolve) => {
    const begin = process.hrtime.bigint();
    let issued = 0;
    let inflight = 0;
    const tick = () => {
      if (stop()) {
        if (inflight === 0) return resolve();
        return setTimeout(tick, 5);
      }
      const due = Math.floor((Number(process.hrtime.bigint() - begin) / 1e9) * rate);
      while (issued < due) {
        const sent = process.hrtime.bigint();
        issued++;
        inflight++;
        call((err) => {
          inflight--;
          record(sent, err);
        });
      }
      // A 1 ms timer, not setImmediate: spinning would take a core from the server under test.
      setTimeout(tick, 1);
    };
    tick();
  });
}

function percentile(sorted, p) {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];
}

async function main() {
  await Promise.all(clients.map((c) => new Promise((res, rej) => c.waitForReady(Date.now() + 10_000, (e) => (e ? rej(e) : res())))));
  const warmupMs = Number(values.warmup) * 1000;
  const runMs = Number(values.seconds) * 1000;
  const t0 = Date.now();
  const stop = () => Date.now() - t0 > warmupMs + runMs;
  setTimeout(() => {
    measuring = true;
  }, warmupMs);
  let measuredFrom;
  setTimeout(() => (measuredFrom = process.hrtime.bigint()), warmupMs);
  if (values.rate) await openLoop(Number(values.rate), stop);
  else await closedLoop(stop);
  const seconds = Number(process.hrtime.bigint() - measuredFrom) / 1e9;
  const sorted = latencies.subarray(0, recorded).sort();
  console.log(
    JSON.stringify({
      decisions: recorded,
      total,
      errors,
      seconds,
      perSecond: recorded / seconds,
      p50: percentile(sorted, 0.5),
      p99: percentile(sorted, 0.99),
      p999: percentile(sorted, 0.999),
    }),
  );
  for (const c of clients) c.close();
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
