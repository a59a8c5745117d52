// npm run fuzz -- --seconds N [--seed S]: the protocol and HTTP fuzzers of test/adversarial as a soak.
// For N seconds each fuzzer attacks real `tollgate serve` processes (memory store and a Redis of its own,
// gRPC and HTTP at once), then this prints what was sent and what went wrong. Exit status 1 when anything
// did. The fuzz logic is the tests' own (test/adversarial/*-cases.ts, fuzz-lib.ts), run by vitest.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '60' },
    seed: { type: 'string' },
  },
});
const seconds = Number(values.seconds);
if (!Number.isFinite(seconds) || seconds <= 0) {
  console.error('--seconds must be a positive number');
  process.exit(2);
}

const dir = mkdtempSync(join(tmpdir(), 'tollgate-fuzz-'));
const reportFile = join(dir, 'report.jsonl');
const env = { ...process.env, FUZZ_SECONDS: String(seconds), FUZZ_REPORT: reportFile, ...(values.seed && { FUZZ_SEED: values.seed }) };
console.log(`fuzzing for ${seconds} s against real service processes${values.seed ? ` (seed ${values.seed})` : ''}`);

const files = ['test/adversarial/grpc-fuzz.test.ts', 'test/adversarial/http-fuzz.test.ts'];
const child = spawn(process.execPath, ['node_modules/vitest/vitest.mjs', 'run', ...files], { stdio: 'inherit', env });
const code = await new Promise((resolve) => child.on('exit', (c, signal) => resolve(c ?? (signal ? 1 : 0))));

const runs = existsSync(reportFile)
  ? readFileSync(reportFile, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((line) => JSON.parse(line))
  : [];
rmSync(dir, { recursive: true, force: true });

const total = (key) => runs.reduce((sum, r) => sum + r[key], 0);
console.log('\nsuite  target                     seed        seconds  sent      crashes  wrong  hangs  leaks');
for (const r of runs) {
  console.log(
    [
      r.suite.padEnd(6),
      r.target.padEnd(26),
      String(r.seed).padEnd(11),
      String(r.seconds).padEnd(8),
      String(r.sent).padEnd(9),
      String(r.crashes).padEnd(8),
      String(r.wrongAnswers).padEnd(6),
      String(r.hangs).padEnd(6),
      String(r.leaks),
    ].join(' '),
  );
}
console.log(
  `\ntotal: ${total('sent')} requests sent, ${total('crashes')} crashes, ${total('wrongAnswers')} wrong answers, ` +
    `${total('hangs')} without an answer in time, ${total('leaks')} leaks (${runs.length} runs)`,
);
if (runs.length === 0) console.log('no run reported: see the vitest output above');
process.exit(code === 0 && runs.length > 0 ? 0 : 1);
