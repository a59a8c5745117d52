// npm run fuzz -- [--minutes M | --seconds N] [--seed S] [--only grpc,http,rlqs,xds,port]: the fuzzers of
// test/adversarial as a soak against real `tollgate serve` processes, then a summary of what was sent and what
// went wrong. Four phases, one after another, so no fuzzer's latency bounds measure another's load: the gRPC
// and HTTP request fuzzers (memory store and a Redis of their own, at once), the RLQS stream fuzzer (memory and
// Redis), the xDS client fuzzer (plaintext and TLS), and the port's (HTTP/2 abuse at random, RLQS streams and
// token reservations together, on each server in turn). --minutes (or FUZZ_MINUTES) is the whole run, shared
// evenly by the phases (default 1); --seconds is each phase's. Exit status 1 when anything went wrong. The fuzz
// logic is the tests' own (test/adversarial/*-cases.ts, soak-*.ts), run by vitest.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

const PHASES = [
  { name: 'grpc+http', fuzzers: ['grpc', 'http'], files: ['test/adversarial/grpc-fuzz.test.ts', 'test/adversarial/http-fuzz.test.ts'] },
  { name: 'rlqs', fuzzers: ['rlqs'], files: ['test/adversarial/rlqs-fuzz.test.ts'] },
  { name: 'xds', fuzzers: ['xds'], files: ['test/adversarial/xds-fuzz.test.ts'] },
  { name: 'port', fuzzers: ['port'], files: ['test/adversarial/port-fuzz.test.ts'] },
];

const { values } = parseArgs({
  options: {
    minutes: { type: 'string' },
    seconds: { type: 'string' },
    seed: { type: 'string' },
    only: { type: 'string' },
  },
});
const only = values.only?.split(',').filter(Boolean);
const phases = PHASES.filter((p) => !only || p.fuzzers.some((f) => only.includes(f)));
if (phases.length === 0) {
  console.error(`--only names none of ${PHASES.flatMap((p) => p.fuzzers).join(', ')}`);
  process.exit(2);
}
const minutes = Number(values.minutes ?? process.env.FUZZ_MINUTES ?? 1);
const seconds = values.seconds !== undefined ? Number(values.seconds) : (minutes * 60) / phases.length;
if (!Number.isFinite(seconds) || seconds <= 0) {
  console.error('--minutes and --seconds must be positive numbers');
  process.exit(2);
}

const dir = mkdtempSync(join(tmpdir(), 'tollgate-fuzz-'));
const reportFile = join(dir, 'report.jsonl');
const env = { ...process.env, FUZZ_SECONDS: String(seconds), FUZZ_REPORT: reportFile, ...(values.seed && { FUZZ_SEED: values.seed }) };
console.log(
  `fuzzing against real service processes: ${phases.map((p) => p.name).join(', ')}, ${Math.round(seconds)} s each` +
    `${values.seed ? ` (seed ${values.seed})` : ''}`,
);

let failed = false;
for (const phase of phases) {
  console.log(`\n=== ${phase.name} (${Math.round(seconds)} s)`);
  const child = spawn(process.execPath, ['node_modules/vitest/vitest.mjs', 'run', ...phase.files], { stdio: 'inherit', env });
  const code = await new Promise((resolve) => child.on('exit', (c, signal) => resolve(c ?? (signal ? 1 : 0))));
  if (code !== 0) failed = true;
}

const runs = existsSync(reportFile)
  ? readFileSync(reportFile, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((line) => JSON.parse(line))
  : [];
rmSync(dir, { recursive: true, force: true });

const columns = [
  ['suite', 6, (r) => r.suite],
  ['target', 26, (r) => r.target],
  ['seed', 11, (r) => r.seed],
  ['seconds', 8, (r) => r.seconds],
  ['sent', 9, (r) => r.sent],
  ['rounds', 7, (r) => r.rounds ?? '-'],
  ['crashes', 8, (r) => r.crashes],
  ['wrong', 6, (r) => r.wrongAnswers],
  ['late', 5, (r) => r.hangs],
  ['leaks', 6, (r) => r.leaks],
  ['over', 5, (r) => r.overBounds ?? '-'],
  ['RSS MiB start/peak/end', 23, (r) => (r.rss ? `${r.rss.start}/${r.rss.peak}/${r.rss.end}` : '-')],
  ['RLS p99 ms', 10, (r) => (r.probeP99Ms !== undefined ? Math.round(r.probeP99Ms) : '-')],
];
console.log(`\n${columns.map(([title, width]) => title.padEnd(width)).join(' ')}`);
for (const r of runs) console.log(columns.map(([, width, value]) => String(value(r)).padEnd(width)).join(' '));

const total = (key) => runs.reduce((sum, r) => sum + (r[key] ?? 0), 0);
console.log(
  `\ntotal: ${total('sent')} requests, streams and connections sent, ${total('rounds')} rounds, ${total('crashes')} crashes, ` +
    `${total('wrongAnswers')} wrong answers, ${total('hangs')} without an answer in time, ${total('leaks')} leaks, ` +
    `${total('overBounds')} rounds over an RSS or log bound (${runs.length} runs)`,
);
if (runs.length === 0) console.log('no run reported: see the vitest output above');
process.exit(!failed && runs.length > 0 ? 0 : 1);
