// Tollgate's own cost per decision, without gRPC or HTTP/2: the bench domain's request decoded, decided
// against the memory store, observed in the metrics, and the response encoded, in a loop in this process.
//   node bench/own-cost.mjs [decisions] [fixed_window|token_bucket]
// token_bucket: the bench domain's limit as a token bucket (1e9 a second, so every call is still admitted and
// counted; an hour of 4e9 would pass the 2^53 bound of a bucket), to compare the algorithms' cost.
// Prints one JSON line: µs per decision, the share of it in GC, and bytes allocated per decision (V8's sampling
// heap profiler over 50,000 more decisions, after the timed ones, counting objects the GC already collected).
import { copyFileSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PerformanceObserver, performance } from 'node:perf_hooks';
import { pino } from 'pino';
import { loadConfigDir } from '../dist/config/load.js';
import { Limiter } from '../dist/limiter/limiter.js';
import { InstrumentedStore } from '../dist/metrics/instrumented-store.js';
import { Metrics } from '../dist/metrics/metrics.js';
import { decideWire } from '../dist/rls/ratelimit-handler.js';
import { defaultBounds } from '../dist/rls/request.js';
import { RLS_SERVICE, serviceDefinition } from '../dist/server/proto.js';
import { MemoryStore } from '../dist/store/memory-store.js';

const n = Number(process.argv[2] ?? 300_000);
const algorithm = process.argv[3] ?? 'fixed_window';
const dir = mkdtempSync(join(tmpdir(), 'tollgate-own-'));
for (const f of readdirSync('config')) if (f.endsWith('.yaml')) copyFileSync(join('config', f), join(dir, f));
const benchDomain = readFileSync('bench/bench-domain.yaml', 'utf8');
writeFileSync(
  join(dir, 'bench.yaml'),
  algorithm === 'token_bucket'
    ? benchDomain.replace('{unit: hour, requests_per_unit: 4000000000}', '{unit: second, requests_per_unit: 1000000000, algorithm: token_bucket}')
    : benchDomain,
);
if (algorithm === 'token_bucket' && !readFileSync(join(dir, 'bench.yaml'), 'utf8').includes('token_bucket'))
  throw new Error('bench domain: limit line not found');
const config = loadConfigDir(dir);
const metrics = new Metrics({ nearLimitRatio: 0.8 });
const store = new InstrumentedStore(new MemoryStore(), metrics);
const limiter = new Limiter({ config: () => config, store });
const deps = { limiter, bounds: defaultBounds, logger: pino({ level: 'info' }), metrics };
const method = serviceDefinition(RLS_SERVICE).ShouldRateLimit;
const bytes = method.requestSerialize({ domain: 'bench', descriptors: [{ entries: [{ key: 'token', value: 'Bearer bench' }] }] });

let gcMs = 0;
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) gcMs += e.duration;
}).observe({ entryTypes: ['gc'] });

async function round(count) {
  for (let i = 0; i < count; i++) method.responseSerialize(await decideWire(deps, method.requestDeserialize(bytes)));
}
await round(50_000); // warm-up
gcMs = 0;
const start = performance.now();
const cpu = process.cpuUsage();
await round(n);
const used = process.cpuUsage(cpu);
const wall = performance.now() - start;
await new Promise((r) => setTimeout(r, 50));
const bytesPerDecision = await allocated(50_000);
console.log(
  JSON.stringify({
    algorithm,
    decisions: n,
    usPerDecision: (wall * 1000) / n,
    cpuUsPerDecision: (used.user + used.system) / n,
    gcShare: gcMs / wall,
    bytesPerDecision,
  }),
);

/** Bytes allocated per decision over `count` decisions: every sampled allocation, live or collected since. */
async function allocated(count) {
  const session = new Session();
  session.connect();
  const sampling = { samplingInterval: 256, includeObjectsCollectedByMinorGC: true, includeObjectsCollectedByMajorGC: true };
  await session.post('HeapProfiler.startSampling', sampling);
  await round(count);
  const { profile } = await session.post('HeapProfiler.stopSampling');
  session.disconnect();
  const sum = (node) => node.selfSize + node.children.reduce((a, c) => a + sum(c), 0);
  return Math.round(sum(profile.head) / count);
}
