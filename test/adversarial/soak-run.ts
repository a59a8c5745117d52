/** The loop of a round-based fuzzer (soak-lib.ts says what each round checks): start the service, take its idle
 * RSS as the baseline, run rounds until the budget is spent, scan /metrics and Redis keys, report one line. A
 * failure names the seed: FUZZ_SEED=<seed> replays the same rounds (the timing of a real process differs). */
import { parseMetrics } from '../helpers/metrics.js';
import { RlsClient } from '../helpers/service.js';
import { bounded } from '../helpers/time.js';
import { caseRng, Findings, fuzzSeed, LeakScanner, makeMarker, report, type Summary, scanAfterRun } from './fuzz-lib.js';
import {
  checkKnown,
  LEAK_GROWTH_MB,
  LOG_BYTES_PER_ROUND,
  LOG_LINES_PER_SECOND,
  PEAK_GROWTH_MB,
  Prober,
  type RoundContext,
  RSS_SETTLE_MS,
  type SoakBudget,
  type SoakSpec,
  TREND_MB,
} from './soak-lib.js';
import { RssSampler, type SoakProcess } from './soak-process.js';

interface Tally {
  rounds: number;
  sent: number;
  kinds: Map<string, number>;
  crashed: boolean;
  wrong: Findings;
  late: Findings;
  /** RSS not back near the baseline, or something the attack held still held after it. */
  leaks: Findings;
  /** RSS past its bound during a round, or the log past its bound. */
  overBounds: Findings;
  rss: { start: number; peak: number; end: number };
  /** RSS once each round had settled. */
  ends: number[];
  latencies: number[];
}

export interface SoakResult {
  problems: number;
  message: string;
  summary: Summary;
}

export async function soakRun(spec: SoakSpec, budget: SoakBudget): Promise<SoakResult> {
  const seed = fuzzSeed();
  const scanner = new LeakScanner(makeMarker(seed));
  const target = await spec.start(scanner).catch(async (err: Error) => {
    await spec.close?.();
    throw err;
  });
  const rls = new RlsClient(target.grpcPort);
  let prober: Prober | undefined;
  const t: Tally = {
    rounds: 0,
    sent: 0,
    kinds: new Map(),
    crashed: false,
    wrong: new Findings(),
    late: new Findings(),
    leaks: new Findings(),
    overBounds: new Findings(),
    rss: { start: 0, peak: 0, end: 0 },
    ends: [],
    latencies: [],
  };
  const startedAt = Date.now();
  try {
    const first = await checkKnown(rls, spec.known, `known-start-${scanner.marker}`);
    if (first) t.wrong.add({ index: -1, kind: 'known descriptor before any round', problem: first });
    prober = await Prober.start(target.grpcPort, spec.probe, budget.light);
    const baseline = target.rssMb();
    t.rss = { start: baseline, peak: baseline, end: baseline };
    for (let index = 0; index < budget.rounds && Date.now() - startedAt < budget.ms && !t.crashed; index++)
      await oneRound(spec, budget, { seed, index, scanner, target, rls, prober, baseline }, t);
    checkTrend(t);
    if (target.alive()) {
      await spec.afterRounds?.(target, rls, (kind, problem) => t.wrong.add({ index: -1, kind, problem }));
      await scanAfterRun(target, scanner);
    } else t.crashed = true;
  } finally {
    rls.close();
    await prober?.close();
    await spec.close?.();
    await target.close();
  }
  const summary = summarize(spec.suite, target.name, seed, startedAt, t, scanner);
  report(summary);
  const problems = (t.crashed ? 1 : 0) + t.wrong.count + t.late.count + t.leaks.count + t.overBounds.count + scanner.leaks.count;
  return { problems, message: explain(`${spec.suite} fuzz, ${target.name}`, seed, t, scanner, target), summary };
}

interface Run {
  seed: number;
  index: number;
  scanner: LeakScanner;
  target: SoakProcess;
  rls: RlsClient;
  prober: Prober;
  baseline: number;
}

/** A round: the attack with the prober beside it and RSS sampled, then the checks once it is over. */
async function oneRound(spec: SoakSpec, budget: SoakBudget, run: Run, t: Tally): Promise<void> {
  const { index, target, scanner } = run;
  const r = caseRng(run.seed, index);
  const ctx: RoundContext = {
    index,
    r,
    marker: scanner.marker,
    target,
    ms: r.between(budget.roundMs[0], budget.roundMs[1]),
    wrong: t.wrong,
    scan: (where, text) => void scanner.check(index, where, text),
    count: (kind, n = 1) => {
      t.sent += n;
      t.kinds.set(kind, (t.kinds.get(kind) ?? 0) + n);
    },
    label: '',
    light: budget.light,
  };
  const logBefore = target.logVolume();
  const roundStart = Date.now();
  const sampler = new RssSampler(() => target.rssMb());
  run.prober.begin(`probe-${index}-${scanner.marker}`);
  // Bounded: a round that does not end (a client waiting on a service that never answers) fails as itself.
  await bounded(spec.round(ctx), ctx.ms + ROUND_GRACE_MS, `round ${index}`).catch((err: Error) =>
    t.wrong.add({ index, kind: 'the round', problem: `the attack did not end cleanly: ${err.stack ?? err}` }),
  );
  t.latencies.push(...(await run.prober.end(index, t)));
  const peak = sampler.stop();
  t.rounds++;
  t.rss.peak = Math.max(t.rss.peak, peak);
  if (!target.alive()) {
    t.crashed = true;
    return;
  }
  if (peak - run.baseline > PEAK_GROWTH_MB)
    t.overBounds.add({ index, kind: 'RSS during the round', problem: `peak ${mb(peak)}, baseline ${mb(run.baseline)} (bound +${PEAK_GROWTH_MB} MiB)` });
  await afterRound(spec, ctx, run, t);
  // The smoke run inside `npm test` does not hold the line rate yet: each refused RLQS stream still writes a line
  // (issue 36 item 8, not landed). The soak (`npm run fuzz`) keeps the bound and reports it; bytes hold in both.
  const lineRate = process.env.VITEST ? Number.POSITIVE_INFINITY : LOG_LINES_PER_SECOND;
  checkLog(target.logVolume(), logBefore, (Date.now() - roundStart) / 1000, index, t.overBounds, lineRate);
  if (progress) {
    const heap = await heapUsed(target.httpPort);
    const findings = t.wrong.count + t.late.count + t.leaks.count + t.overBounds.count;
    const took = ((Date.now() - roundStart) / 1000).toFixed(1);
    console.log(
      `[fuzz] ${spec.suite} ${target.name} round ${index} (${ctx.label}): ${ctx.ms} ms attack, ${took} s in all, ` +
        `RSS peak ${mb(peak)}, end ${mb(t.rss.end)} (heap ${heap}), findings so far ${findings}`,
    );
  }
}

/** Once the attack is over: what it held let go, the known descriptor answered exactly, RSS back. */
async function afterRound(spec: SoakSpec, ctx: RoundContext, run: Run, t: Tally): Promise<void> {
  const { index } = ctx;
  const held = await bounded(spec.settle(ctx), ROUND_GRACE_MS, 'settling').catch((err: Error) => err.message);
  if (held) t.leaks.add({ index, kind: 'held after the round', problem: held });
  const known = await checkKnown(run.rls, spec.known, `known-${index}-${run.scanner.marker}`);
  if (known) (known.includes('DEADLINE_EXCEEDED') ? t.late : t.wrong).add({ index, kind: 'known descriptor after the round', problem: known });
  const bound = spec.settleMb ?? LEAK_GROWTH_MB;
  t.rss.end = await rssBack(run.target, run.baseline, bound);
  t.ends.push(t.rss.end);
  if (t.rss.end - run.baseline > bound) {
    const problem = `${mb(t.rss.end)} ${RSS_SETTLE_MS} ms after, baseline ${mb(run.baseline)} (bound +${bound} MiB)`;
    t.leaks.add({ index, kind: 'RSS after the round', problem });
  }
}

/** The main thread's V8 heap in use (prom-client's series), to tell a leak of objects from memory the allocator
 * keeps: a heap back where it was beside a higher RSS is not a leak of Tollgate's. */
async function heapUsed(httpPort: number): Promise<string> {
  const series = await fetch(`http://127.0.0.1:${httpPort}/metrics`, { signal: AbortSignal.timeout(5000) })
    .then(async (res) => parseMetrics(await res.text()))
    .catch(() => new Map<string, number>());
  const used = series.get('nodejs_heap_size_used_bytes');
  return used === undefined ? 'unknown' : mb(used / 1024 / 1024);
}

/** What a round may take past its attack's time before it counts as hung (clients wait up to 5 s for a status). */
const ROUND_GRACE_MS = 30_000;
/** A line per round in a soak (FUZZ_PROGRESS=0 turns it off), so a long run shows where it is. */
const progress = Number(process.env.FUZZ_SECONDS ?? 0) > 0 && process.env.FUZZ_PROGRESS !== '0';

/** A leak too slow for the per-round bound: settled RSS still climbing between the middle and the last third. */
function checkTrend(t: Tally): void {
  const third = Math.floor(t.ends.length / 3);
  if (t.ends.length < 12) return;
  const middle = Math.min(...t.ends.slice(third, 2 * third));
  const last = Math.min(...t.ends.slice(2 * third));
  if (last - middle > TREND_MB)
    t.leaks.add({
      index: -1,
      kind: 'RSS trend',
      problem: `settled RSS at least ${mb(middle)} in the middle third of the rounds, ${mb(last)} in the last (bound +${TREND_MB} MiB)`,
    });
}

/** Waits (bounded) for RSS to come back under the leak bound; the last reading. */
async function rssBack(target: SoakProcess, baseline: number, bound: number): Promise<number> {
  const until = Date.now() + RSS_SETTLE_MS;
  let rss = target.rssMb();
  while (rss - baseline > bound && Date.now() < until && target.alive()) {
    await new Promise((r) => setTimeout(r, 250));
    rss = target.rssMb();
  }
  return rss;
}

export function checkLog(
  after: ReturnType<SoakProcess['logVolume']>,
  before: ReturnType<SoakProcess['logVolume']>,
  seconds: number,
  index: number,
  f: Findings,
  lineRate = LOG_LINES_PER_SECOND,
): void {
  const bytes = after.bytes - before.bytes;
  const lines = after.lines - before.lines;
  if (bytes > LOG_BYTES_PER_ROUND || lines > lineRate * Math.max(seconds, 1))
    f.add({
      index,
      kind: 'log volume',
      problem:
        `${lines} lines, ${(bytes / 1024).toFixed(0)} KiB in ${seconds.toFixed(1)} s, longest line ${after.longest} bytes ` +
        `(bounds: ${LOG_BYTES_PER_ROUND / 1024} KiB a round, ${lineRate} lines a second)`,
    });
}

const mb = (n: number): string => `${n.toFixed(0)} MiB`;

function percentile(values: number[], p: number): number {
  if (values.length === 0) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

function summarize(suite: string, name: string, seed: number, startedAt: number, t: Tally, scanner: LeakScanner): Summary {
  const round = (n: number): number => Math.round(n);
  return {
    suite,
    target: name,
    seed,
    seconds: Math.round((Date.now() - startedAt) / 100) / 10,
    sent: t.sent,
    crashes: t.crashed ? 1 : 0,
    wrongAnswers: t.wrong.count,
    hangs: t.late.count,
    leaks: t.leaks.count + scanner.leaks.count,
    kinds: Object.fromEntries([...t.kinds].sort()),
    rounds: t.rounds,
    rss: { start: round(t.rss.start), peak: round(t.rss.peak), end: round(t.rss.end) },
    overBounds: t.overBounds.count,
    probeP99Ms: percentile(t.latencies, 99),
  };
}

function explain(suite: string, seed: number, t: Tally, scanner: LeakScanner, target: SoakProcess): string {
  const show = (title: string, list: Findings): string[] =>
    list.count === 0 ? [] : [`${title} (${list.count}):`, ...list.first.slice(0, 8).map((f) => `  round ${f.index} [${f.kind}]: ${f.problem.slice(0, 600)}`)];
  return [
    `${suite}: seed ${seed}; replay with FUZZ_SEED=${seed}`,
    ...(t.crashed ? [`the service process exited (${target.exitStatus()})`] : []),
    ...show('wrong answers', t.wrong),
    ...show('no answer within the deadline', t.late),
    ...show('leaks (held after a round, RSS not back)', t.leaks),
    ...show('over a bound (RSS during a round, log volume)', t.overBounds),
    ...show('marker leaks', scanner.leaks),
  ].join('\n');
}
