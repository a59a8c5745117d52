/** The shared half of the adversarial suite: seeded randomness, the planted marker and the leak scanner,
 * the services under attack (in this process, or a real `tollgate serve` process for the soak), and a
 * bounded runner that tallies requests sent, crashes, wrong answers, hangs and leaks.
 *
 * Every case is derived from (seed, case index) alone, so a failure replays with FUZZ_SEED=<seed>, and
 * FUZZ_ONLY=<index> runs just that case, whatever the concurrency was. */
import { type ChildProcess, spawn } from 'node:child_process';
import { appendFileSync, readFileSync } from 'node:fs';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import type { RequestBounds } from '../../src/rls/request.js';
import { freePort, loopback } from '../helpers/process.js';
import { type RedisServer, startRedis } from '../helpers/redis.js';
import { configDir, startTestService, type TestService } from '../helpers/service.js';

// ---------------------------------------------------------------- randomness

/** The run's seed: FUZZ_SEED when given (to replay a failure), else fresh. */
export function fuzzSeed(): number {
  const given = process.env.FUZZ_SEED;
  if (given !== undefined && given !== '') return Number(given) >>> 0;
  return Math.floor(Math.random() * 2 ** 32) >>> 0;
}

/** mulberry32: small, fast, and the same sequence for the same seed everywhere. */
export class Rng {
  private state: number;
  constructor(seed: number) {
    this.state = seed >>> 0;
  }

  next(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  }

  /** 0 ≤ n < max */
  int(max: number): number {
    return Math.floor(this.next() * max);
  }

  between(min: number, max: number): number {
    return min + this.int(max - min + 1);
  }

  chance(p: number): boolean {
    return this.next() < p;
  }

  pick<T>(items: readonly T[]): T {
    return items[this.int(items.length)]!;
  }

  bytes(n: number): number[] {
    return Array.from({ length: n }, () => this.int(256));
  }
}

/** The generator of case `index`: independent of every other case, so cases replay one by one. */
export function caseRng(seed: number, index: number): Rng {
  let h = (seed ^ Math.imul(index + 1, 0x9e3779b1)) >>> 0;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b) >>> 0;
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35) >>> 0;
  return new Rng((h ^ (h >>> 16)) >>> 0);
}

// ---------------------------------------------------------------- the marker and the leak scanner

/** Letters outside a–f: fingerprints and hashes are hex, so none can hold the marker by chance. */
const MARKER_LETTERS = 'GHJKLMNPQRSTVWXYZ';

/** A marker of 16 letters (`ZQXJ` + 12), planted in every request field; finding it anywhere is a leak. */
export function makeMarker(seed: number): string {
  const r = new Rng(seed ^ 0x5eed);
  return `ZQXJ${Array.from({ length: 12 }, () => r.pick([...MARKER_LETTERS])).join('')}`;
}

export interface Finding {
  /** The case index (replay with FUZZ_SEED=<seed> FUZZ_ONLY=<index>), or -1 for a finding after the run. */
  index: number;
  kind: string;
  problem: string;
}

/** Findings of one sort: all counted, the first few kept (a soak against a broken build must not hoard). */
export class Findings {
  count = 0;
  readonly first: Finding[] = [];
  add(f: Finding): void {
    this.count++;
    if (this.first.length < 50) this.first.push(f);
  }
}

/** Looks for the marker, in any letter case, in text that leaves the service. Streams are scanned with an
 * overlap, so a marker split across two chunks is still found. */
export class LeakScanner {
  readonly leaks = new Findings();
  private readonly needle: string;
  constructor(readonly marker: string) {
    this.needle = marker.toLowerCase();
  }

  /** Records a leak if `text` holds the marker; returns whether it did. */
  check(index: number, where: string, text: string): boolean {
    const at = text.toLowerCase().indexOf(this.needle);
    if (at === -1) return false;
    const excerpt = text.slice(Math.max(0, at - 120), at + this.needle.length + 60).replace(/\n/g, '⏎');
    this.leaks.add({ index, kind: where, problem: `marker in ${where}: …${excerpt}…` });
    return true;
  }

  /** A scanner for a stream of chunks (log output). */
  stream(where: string): (chunk: string) => void {
    let tail = '';
    return (chunk) => {
      const text = tail + chunk;
      this.check(-1, where, text);
      tail = text.slice(-(this.needle.length - 1));
    };
  }
}

// ---------------------------------------------------------------- the services under attack

export const FUZZ_BOUNDS: RequestBounds = { maxDescriptors: 8, maxEntries: 6, maxValueBytes: 512 };
export const ADMIN_TOKEN = 'fuzz-admin-credential';
export const KNOWN_TIERS = ['multi-property-group', 'gold'];

/** A second domain beside the property API: prefix wildcards, defaults, tiers, shadow, sliding, unlimited. */
const FUZZ_YAML = `
domain: fuzz
token_key: token
tiers:
  gold: {}
descriptors:
  - key: path
    value: /api*
    rate_limit: {unit: second, requests_per_unit: 5, name: api-prefix}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 100, name: any-path}
    descriptors:
      - key: token
        rate_limits:
          - {unit: second, requests_per_unit: 3, name: path-token-second}
          - {unit: hour, requests_per_unit: 50, name: path-token-hour}
        tier_limits:
          gold:
            - {unit: second, requests_per_unit: 9}
            - {unit: hour, requests_per_unit: 50}
  - key: shadowed
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1, name: shadowed}
  - key: sliding
    algorithm: sliding_window
    rate_limit: {unit: second, requests_per_unit: 2, name: sliding}
  - key: free
    rate_limit: {unlimited: true}
`;

export interface Target {
  name: string;
  grpcPort: number;
  httpPort: number;
  adminPort: number;
  redis?: RedisServer;
  /** False once the service process has exited (a crash). */
  alive(): boolean;
  close(): Promise<void>;
}

export type Mode = 'in-process' | 'process';

function serveArgs(dir: string, redis: RedisServer | undefined): string[] {
  const args = ['--config', dir, '--config-poll-ms', '0', '--max-descriptors', String(FUZZ_BOUNDS.maxDescriptors)];
  args.push('--max-entries', String(FUZZ_BOUNDS.maxEntries), '--max-value-bytes', String(FUZZ_BOUNDS.maxValueBytes));
  // A generous Redis timeout: a machine busy with the fuzzer itself must not turn answers into UNAVAILABLE.
  if (redis) args.push('--store', 'redis', '--redis-url', redis.url, '--redis-timeout-ms', '2000', '--redis-key-prefix', 'fuzz:');
  return args;
}

/** Starts the service with the memory store or a Redis of its own, logging at trace into the scanner. */
export async function startTarget(store: 'memory' | 'redis', mode: Mode, scanner: LeakScanner): Promise<Target> {
  const dir = configDir({ 'property-api.yaml': readFileSync('config/property-api.yaml', 'utf8'), 'fuzz.yaml': FUZZ_YAML });
  const redis = store === 'redis' ? await startRedis() : undefined;
  try {
    const name = `${store} store, ${mode}`;
    const args = serveArgs(dir, redis);
    return mode === 'in-process' ? await inProcess(name, args, redis, scanner) : await childProcess(name, args, redis, scanner);
  } catch (err) {
    await redis?.stop();
    throw err;
  }
}

async function inProcess(name: string, args: string[], redis: RedisServer | undefined, scanner: LeakScanner): Promise<Target> {
  const scan = scanner.stream('log');
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      scan(chunk.toString());
      done();
    },
  });
  const t: TestService = await startTestService({ args, realClock: true, env: { TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN }, logger: pino({ level: 'trace' }, sink) });
  return {
    name,
    grpcPort: t.service.grpcPort,
    httpPort: t.service.httpPort,
    adminPort: t.service.adminPort!,
    redis,
    alive: () => true,
    close: async () => {
      await t.close();
      await redis?.stop();
    },
  };
}

/** `node dist/cli.js serve` on free ports; its stdout and stderr are scanned as they arrive, never kept whole. */
async function childProcess(name: string, args: string[], redis: RedisServer | undefined, scanner: LeakScanner): Promise<Target> {
  const [grpcPort, httpPort, adminPort] = [await freePort(), await freePort(), await freePort()];
  const all = [...args, ...loopback(grpcPort, httpPort), '--admin-port', String(adminPort)];
  const child: ChildProcess = spawn(process.execPath, ['dist/cli.js', 'serve', ...all], {
    env: { ...process.env, LOG_LEVEL: 'trace', TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const scanOut = scanner.stream('log');
  const scanErr = scanner.stream('stderr');
  let head = '';
  const ready = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${name}: not serving within 15 s:\n${head}`)), 15_000);
    child.stdout!.on('data', (d: Buffer) => {
      scanOut(d.toString());
      if (head.length < 20_000) head += d.toString();
      if (head.includes('tollgate serving')) {
        clearTimeout(timer);
        resolve();
      }
    });
    child.once('exit', (code) => reject(new Error(`${name}: exited with ${code} before serving:\n${head}`)));
  });
  child.stderr!.on('data', (d: Buffer) => scanErr(d.toString()));
  await ready;
  return {
    name,
    grpcPort,
    httpPort,
    adminPort,
    redis,
    alive: () => child.exitCode === null && child.signalCode === null,
    close: async () => {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((r) => child.once('exit', r));
        child.kill('SIGTERM');
        await exited;
      }
      await redis?.stop();
    },
  };
}

// ---------------------------------------------------------------- the runner

export interface Budget {
  cases: number;
  ms: number;
  concurrency: number;
  /** Run this case index only (FUZZ_ONLY). */
  only?: number;
}

/** Cases and time for a test run, or for the soak when FUZZ_SECONDS is set (then against a real process). */
export function budgetFromEnv(cases: number, ms: number, concurrency: number): { budget: Budget; mode: Mode; soak: boolean } {
  const only = process.env.FUZZ_ONLY ? Number(process.env.FUZZ_ONLY) : undefined;
  const seconds = Number(process.env.FUZZ_SECONDS ?? 0);
  if (seconds > 0) return { budget: { cases: 100_000_000, ms: seconds * 1000, concurrency, only }, mode: 'process', soak: true };
  return { budget: { cases, ms, concurrency, only }, mode: 'in-process', soak: false };
}

export interface Tally {
  sent: number;
  crashes: number;
  wrong: Findings;
  hangs: Findings;
  kinds: Map<string, number>;
}

/** Runs cases 0, 1, 2 … on `concurrency` workers until the count or the time is used up. `exec` answers
 * 'ok', a wrong-answer problem, or 'hang' (no answer within its deadline). */
export async function runCases<C extends { kind: string }>(
  seed: number,
  budget: Budget,
  generate: (r: Rng, index: number) => C,
  exec: (c: C, index: number) => Promise<Outcome>,
  alive: () => boolean,
): Promise<Tally> {
  const tally: Tally = { sent: 0, crashes: 0, wrong: new Findings(), hangs: new Findings(), kinds: new Map() };
  const deadline = Date.now() + budget.ms;
  let next = budget.only ?? 0;
  const last = budget.only !== undefined ? budget.only + 1 : budget.cases;
  const worker = async (): Promise<void> => {
    while (next < last && Date.now() < deadline && alive()) {
      const index = next++;
      const c = generate(caseRng(seed, index), index);
      tally.sent++;
      tally.kinds.set(c.kind, (tally.kinds.get(c.kind) ?? 0) + 1);
      const outcome = await exec(c, index);
      if (outcome === 'hang') tally.hangs.add({ index, kind: c.kind, problem: 'no answer within the deadline' });
      else if (outcome !== 'ok') tally.wrong.add({ index, kind: c.kind, problem: outcome.wrong });
    }
  };
  await Promise.all(Array.from({ length: budget.concurrency }, worker));
  if (!alive()) tally.crashes++;
  return tally;
}

/** Everything wrong in a run: a crash, wrong answers, missed deadlines, leaks. */
export function problemCount(tally: Tally, scanner: LeakScanner): number {
  return tally.crashes + tally.wrong.count + tally.hangs.count + scanner.leaks.count;
}

/** Everything that must not be found after a run: the marker in /metrics and in Redis keys. */
export async function scanAfterRun(target: Pick<Target, 'httpPort' | 'redis'>, scanner: LeakScanner): Promise<void> {
  const metrics = await fetch(`http://127.0.0.1:${target.httpPort}/metrics`).then((r) => r.text());
  scanner.check(-1, '/metrics', metrics);
  if (target.redis) {
    // Redis glob patterns are case-sensitive: one class per letter finds the marker in any case.
    const pattern = `*${[...scanner.marker].map((c) => `[${c.toLowerCase()}${c}]`).join('')}*`;
    const keys = await target.redis.cli('--scan', '--pattern', pattern);
    if (keys) scanner.check(-1, 'a Redis key', keys);
  }
}

export interface Summary {
  suite: string;
  target: string;
  seed: number;
  seconds: number;
  sent: number;
  crashes: number;
  wrongAnswers: number;
  hangs: number;
  leaks: number;
  kinds: Record<string, number>;
  /** The round-based fuzzers' (soak-run.ts): rounds run; the service's RSS in MiB at the start, at its peak and
   * at the end; rounds over the RSS or log bounds; the 99th percentile of RLS calls made during the rounds. */
  rounds?: number;
  rss?: { start: number; peak: number; end: number };
  overBounds?: number;
  probeP99Ms?: number;
}

export function summarize(suite: string, target: string, seed: number, startedAt: number, tally: Tally, scanner: LeakScanner): Summary {
  return {
    suite,
    target,
    seed,
    seconds: Math.round((Date.now() - startedAt) / 100) / 10,
    sent: tally.sent,
    crashes: tally.crashes,
    wrongAnswers: tally.wrong.count,
    hangs: tally.hangs.count,
    leaks: scanner.leaks.count,
    kinds: Object.fromEntries([...tally.kinds].sort()),
  };
}

/** One line for the log of the run, appended to FUZZ_REPORT (the soak's totals) when set. */
export function report(summary: Summary): void {
  const { kinds: _kinds, ...line } = summary;
  console.log(`[fuzz] ${JSON.stringify(line)}`);
  if (process.env.FUZZ_REPORT) appendFileSync(process.env.FUZZ_REPORT, `${JSON.stringify(summary)}\n`);
}

export type Outcome = 'ok' | 'hang' | { wrong: string };

/** A fuzzer armed against one running target: it makes case `index` and sends it. */
export interface Attack<C extends { kind: string }> {
  generate(r: Rng, index: number): C;
  exec(c: C, index: number): Promise<Outcome>;
  close(): void;
}

/** A whole run: start the target (its logs into the scanner), attack it within the budget, scan /metrics and
 * Redis keys, report. The failure message names the seed and the first findings. */
export async function fuzzRun<C extends { kind: string }>(
  suite: string,
  store: 'memory' | 'redis',
  env: { budget: Budget; mode: Mode },
  arm: (target: Target, scanner: LeakScanner) => Attack<C>,
): Promise<{ problems: number; message: string; sent: number }> {
  const seed = fuzzSeed();
  const scanner = new LeakScanner(makeMarker(seed));
  const target = await startTarget(store, env.mode, scanner);
  const startedAt = Date.now();
  const attack = arm(target, scanner);
  try {
    const tally = await runCases(seed, env.budget, attack.generate, attack.exec, target.alive);
    if (target.alive()) await scanAfterRun(target, scanner);
    else tally.crashes = 1;
    report(summarize(suite, target.name, seed, startedAt, tally, scanner));
    return { problems: problemCount(tally, scanner), message: explainFailures(`${suite} fuzz, ${target.name}`, seed, tally, scanner), sent: tally.sent };
  } finally {
    attack.close();
    await target.close();
  }
}

/** The failure message: the seed, how to replay, and the first findings of each sort. */
export function explainFailures(suite: string, seed: number, tally: Tally, scanner: LeakScanner): string {
  const show = (title: string, list: Findings): string[] =>
    list.count === 0 ? [] : [`${title} (${list.count}):`, ...list.first.slice(0, 8).map((f) => `  case ${f.index} [${f.kind}]: ${f.problem.slice(0, 400)}`)];
  return [
    `${suite}: seed ${seed}; replay with FUZZ_SEED=${seed} (one case: FUZZ_SEED=${seed} FUZZ_ONLY=<case>)`,
    ...(tally.crashes ? ['the service process exited'] : []),
    ...show('wrong answers', tally.wrong),
    ...show('no answer within the deadline', tally.hangs),
    ...show('leaks', scanner.leaks),
  ].join('\n');
}
