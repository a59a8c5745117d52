// Lean load driver, run as its own process: node:http2 with every gRPC request framed once up front, no
// grpc-js on the client side, so the driver costs far less per call than the server it drives. Prints one
// JSON line: decisions, errors, rate, latency percentiles and the driver's own CPU.
//   node bench/h2-driver.mjs --target 127.0.0.1:8081 --seconds 6 [--rate 5000] [--mix property|bench|tokens]
//                            [--connections 4] [--concurrency 128]
import { connect, constants } from 'node:http2';
import { parseArgs } from 'node:util';
import { withGrpcPrefix } from '../dist/rls/rls-codec.js';
import { RLS_SERVICE, serviceDefinition } from '../dist/server/proto.js';

const { values } = parseArgs({
  options: {
    target: { type: 'string' },
    seconds: { type: 'string', default: '6' },
    warmup: { type: 'string', default: '1' },
    rate: { type: 'string' },
    mix: { type: 'string', default: 'property' },
    connections: { type: 'string', default: '4' },
    concurrency: { type: 'string', default: '128' },
  },
});

const method = serviceDefinition(RLS_SERVICE).ShouldRateLimit;

/** A gRPC message frame: uncompressed flag, 4-byte length, the protobuf bytes. */
function frame(request) {
  const body = method.requestSerialize(request);
  return withGrpcPrefix(body);
}

/** property: the property API's traffic (70% read, 20% write, 10% reports; 20% from 20 hot tokens far over
 * their limits, the rest over 5,000 tokens). bench: one token under a limit no run reaches (every call is
 * admitted and counted). tokens: the same limit over 5,000 tokens in turn, so a Cluster's three masters share
 * every batch. */
function buildFrames() {
  const bench = (value) => frame({ domain: 'bench', descriptors: [{ entries: [{ key: 'token', value }] }], hits_addend: 0 });
  if (values.mix === 'bench') return [bench('Bearer bench')];
  if (values.mix === 'tokens') return Array.from({ length: 5000 }, (_, i) => bench(`Bearer bench-${i}`));
  const out = [];
  let seed = 42;
  const random = () => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed / 2 ** 31;
  };
  for (let i = 0; i < 20_000; i++) {
    const r = random();
    const category = r < 0.7 ? 'read' : r < 0.9 ? 'write' : 'reports';
    const token = random() < 0.2 ? `hot-${Math.floor(random() * 20)}` : `client-${Math.floor(random() * 5000)}`;
    out.push(
      frame({
        domain: 'property-api',
        descriptors: [
          {
            entries: [
              { key: 'category', value: category },
              { key: 'token', value: `Bearer ${token}` },
            ],
          },
        ],
      }),
    );
  }
  return out;
}

const frames = buildFrames();
const headers = {
  [constants.HTTP2_HEADER_METHOD]: 'POST',
  [constants.HTTP2_HEADER_PATH]: method.path,
  [constants.HTTP2_HEADER_SCHEME]: 'http',
  'content-type': 'application/grpc',
  te: 'trailers',
  'grpc-timeout': '5S',
};
const sessions = Array.from({ length: Number(values.connections) }, () => {
  const s = connect(`http://${values.target}`, { settings: { initialWindowSize: 1 << 20 }, peerMaxConcurrentStreams: 10_000 });
  s.on('error', () => undefined); // counted per stream
  return s;
});
/** An open loop that the target cannot keep up with would grow its queue without bound: past this many calls
 * in flight, a due call is counted as an error instead of sent. */
const MAX_IN_FLIGHT = 4096;

const latencies = new Float64Array(4_000_000);
let recorded = 0;
let errors = 0;
let total = 0;
let measuring = false;
let next = 0;

/** One call; `done` runs when its trailers (grpc-status) arrive. */
function call(done) {
  const i = next++;
  const session = sessions[i % sessions.length];
  let stream;
  try {
    if (session.destroyed) throw new Error('session gone');
    stream = session.request(headers, { endStream: false });
  } catch {
    if (measuring) errors++;
    total++;
    return void setImmediate(done);
  }
  const sent = process.hrtime.bigint();
  let status = -1;
  stream.on('response', (h) => {
    if (h['grpc-status'] !== undefined) status = Number(h['grpc-status']);
  });
  stream.on('trailers', (t) => (status = Number(t['grpc-status'])));
  stream.on('data', () => undefined);
  stream.on('error', () => (status = -2));
  stream.on('close', () => {
    total++;
    if (measuring) {
      if (status !== 0) errors++;
      else if (recorded < latencies.length) latencies[recorded++] = Number(process.hrtime.bigint() - sent) / 1e6;
    }
    done();
  });
  stream.end(frames[i % frames.length]);
}

function closedLoop(stop) {
  return Promise.all(
    Array.from(
      { length: Number(values.concurrency) },
      () =>
        new Promise((resolve) => {
          const loop = () => (stop() ? resolve() : call(loop));
          loop();
        }),
    ),
  );
}

/** `rate` calls a second on a fixed schedule whatever the answers do (open loop); 1 ms ticks, not spinning. */
function openLoop(rate, stop) {
  return new Promise((resolve) => {
    const begin = process.hrtime.bigint();
    let issued = 0;
    let inflight = 0;
    const tick = () => {
      if (stop()) return inflight === 0 ? resolve() : setTimeout(tick, 5);
      const due = Math.floor((Number(process.hrtime.bigint() - begin) / 1e9) * rate);
      for (; issued < due; issued++) {
        if (inflight >= MAX_IN_FLIGHT) {
          if (measuring) errors++;
          continue;
        }
        inflight++;
        call(() => inflight--);
      }
      setTimeout(tick, 1);
    };
    tick();
  });
}

const percentile = (sorted, p) => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] : 0);

async function main() {
  await Promise.all(
    sessions.map(
      (s) =>
        new Promise((resolve, reject) => {
          s.once('connect', resolve);
          s.once('error', reject);
        }),
    ),
  );
  const warmupMs = Number(values.warmup) * 1000;
  const t0 = Date.now();
  const stop = () => Date.now() - t0 > warmupMs + Number(values.seconds) * 1000;
  let from;
  let cpu;
  setTimeout(() => {
    measuring = true;
    from = process.hrtime.bigint();
    cpu = process.cpuUsage();
  }, warmupMs);
  if (values.rate) await openLoop(Number(values.rate), stop);
  else await closedLoop(stop);
  const seconds = Number(process.hrtime.bigint() - from) / 1e9;
  const used = process.cpuUsage(cpu);
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
      driverCpuShare: (used.user + used.system) / 1e6 / seconds,
    }),
  );
  for (const s of sessions) s.close();
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
