/** The CLI side of the tuning tools: arguments, files and output of `tollgate simulate` and `tollgate explain`;
 * what they compute is src/tuning/ (and src/limiter/explain.ts). */
import { createWriteStream, existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { CompiledConfig } from '../config/compiled.js';
import { loadConfigDir } from '../config/load.js';
import { MAX_UINT32, parseUnit, UNIT_NAMES } from '../config/units.js';
import type { TierAssignment } from '../control/tier-store.js';
import { loadEnvoyCallSetup } from '../envoy/routes.js';
import { CliError, systemCause } from '../errors.js';
import { fingerprint } from '../fingerprint.js';
import { type Explanation, explain } from '../limiter/explain.js';
import type { DescriptorInput, TierSource } from '../limiter/plan.js';
import { bucketEntries } from '../rlqs/quota/bucket-descriptor.js';
import { planBucket } from '../rlqs/quota/bucket-plan.js';
import { bucketExplanation, formatBucket } from '../tuning/bucket-report.js';
import { findDecisions, formatDecision } from '../tuning/decision-lines.js';
import { generateDefaults, generateTraffic } from '../tuning/generate.js';
import { htmlReport, type ReportRun } from '../tuning/html-report.js';
import { replay } from '../tuning/replay.js';
import { compare, formatComparison, formatExplanation, formatSimulation } from '../tuning/report.js';
import { Simulation } from '../tuning/simulate.js';
import { TRAFFIC_FORMATS } from '../tuning/traffic.js';
import { explainViaService, xdsHint } from './explain-remote.js';

export const SIMULATE_HELP = `Usage: tollgate simulate --traffic FILE [--config DIR] [--envoy FILE] [--compare DIR2] [--tiers FILE] [--top N]
                         [--json] [--report FILE.html] [--format auto|jsonl|csv] [--skip-bad-lines]
       tollgate simulate --generate N [--out FILE] [--seed S] [--rate R]

Replays a traffic log through Tollgate's own matching and limiter code on a virtual clock, and reports per
rule: requests, admitted, rejected, peak per-second use, and the most limited tokens (by fingerprint); with
costs, the tokens charged per client; with in_flight rules, the slots taken, refused and held at most.
Each request makes Envoy's calls: the request phase at its time, the stream-done call (apply_on_stream_done)
at its time + its duration.
  --traffic FILE   JSON lines or CSV with a header: timestamp (ISO or Unix s/ms), method, path, and
                   authorization or fingerprint; Envoy JSON access-log names (start_time, method, path) too;
                   optional: cost (or tokens, hits, hits_addend), duration_ms (or duration, latency_ms; needed
                   by in_flight rules), x-… request headers (x-tenant-id, x-request-id) or a headers object
  --format F       auto (default: .jsonl/.ndjson/.json or .csv by extension, else by the first line), jsonl, csv
  --skip-bad-lines replay the lines that are requests and warn about the rest (default: a line that is not
                   a request fails the run, naming every bad line by number)
  --report FILE    also write an HTML page: per rule, requests and admitted per second over time, and the
                   most limited clients; with --compare, both configs on the same axes
  --config DIR     descriptor config (default ./config)
  --envoy FILE     routes → descriptors, as Envoy builds them (default envoy/envoy.yaml, else the bundled one)
  --compare DIR2   replay the same traffic under a second config and show the difference rule by rule
  --tiers FILE     tier assignments, as 'tollgate tiers list --json' prints them
  --top N          how many of the most limited tokens, and of the clients charged most, to list (default 10)
  --json           print the report as JSON
  --generate N     write N lines of realistic property-API traffic (stdout, or --out FILE)
  --seed S         the generator's seed: the same seed writes the same log (default ${generateDefaults.seed})
  --rate R         the generated log's average requests a second (default ${generateDefaults.rate})
`;

export const EXPLAIN_HELP = `Usage: tollgate explain [--config DIR] [--tiers FILE] [--hits N] [--json] DOMAIN key=value [key=value …] [+ key=value …]
       tollgate explain --url URL [--hits N] [--json] DOMAIN key=value [key=value …] [+ key=value …]
       tollgate explain --bucket [--config DIR] [--tiers FILE] [--json] DOMAIN key=value [key=value …]
       tollgate explain --log FILE [--client TOKEN|FINGERPRINT] [--trace-id ID] [--over] [--last N] [--json]

Shows which rule each descriptor matches and why (exact value, wildcard, the key's default), the tier and
limits that apply, replaced limits, and which window a burst runs into first. '+' starts another descriptor.
What Envoy can add to a descriptor, written after its entries: @limit=N/UNIT (its per-descriptor limit, e.g.
@limit=5/minute) and @hits=N (its hits_addend; 0 checks only; -N: N given back, is_negative_hits, as at a
stream's end). --hits N: the request's hits_addend.
--url URL: ask the running service (its HTTP port, e.g. http://127.0.0.1:8080) instead of reading a
config: its own config (the one to ask when it comes from an xDS server, as under Envoy Gateway) and live
counters; values are shown as fingerprints. It is POST /explain, with a RateLimitRequest as JSON.

With --bucket: the pairs are an RLQS BucketId (Envoy's rate_limit_quota filter; their order does not matter):
the descriptor it becomes (the config orders its entries), what its assignments are made from, then the
explanation of that descriptor.

With --log: the decision log lines (DECISION_LOG=over or all, LOG_FORMAT=json) of one client or trace, the
last N (default 20): when, the answer, the rule and limit that blocked, what was left, when to retry.
  --client X     the client's token (hashed here, never printed) or its fingerprint (tollgate fingerprint)
  --trace-id ID  the trace of one call (Envoy's, or the one the span was given)
  --over         429s only
`;

/** The envoy.yaml in the working directory, else the one shipped with Tollgate. */
function defaultEnvoyFile(): string {
  const local = join(process.cwd(), 'envoy', 'envoy.yaml');
  return existsSync(local) ? local : fileURLToPath(new URL('../../envoy/envoy.yaml', import.meta.url));
}

function readAssignments(file: string | undefined): TierAssignment[] {
  if (!file) return [];
  let data: { assignments?: TierAssignment[] } | TierAssignment[];
  try {
    data = JSON.parse(readFileSync(readableFile(file, 'tier assignments (--tiers)'), 'utf8')) as typeof data;
  } catch (err) {
    if (err instanceof CliError) throw err;
    throw new CliError(`${file}: not the JSON 'tollgate tiers list --json' prints`);
  }
  return Array.isArray(data) ? data : (data.assignments ?? []);
}

/** `file` when it is a file that can be read; else one line saying why not. */
function readableFile(file: string, what: string): string {
  let st: ReturnType<typeof statSync>;
  try {
    st = statSync(file);
  } catch (err) {
    throw new CliError(`cannot read ${what} ${file}: ${systemCause(err)}`);
  }
  if (!st.isFile()) throw new CliError(`cannot read ${what} ${file}: ${st.isDirectory() ? 'it is a directory' : 'not a regular file'}`);
  return file;
}

export const SIMULATE_OPTIONS = {
  traffic: { type: 'string' },
  config: { type: 'string', default: './config' },
  envoy: { type: 'string' },
  compare: { type: 'string' },
  tiers: { type: 'string' },
  top: { type: 'string', default: '10' },
  json: { type: 'boolean', default: false },
  report: { type: 'string' },
  format: { type: 'string', default: 'auto' },
  'skip-bad-lines': { type: 'boolean', default: false },
  generate: { type: 'string' },
  out: { type: 'string' },
  seed: { type: 'string' },
  rate: { type: 'string' },
} as const;

export async function simulateCommand(args: string[]): Promise<number> {
  const { values } = parseArgs({ args, strict: true, options: SIMULATE_OPTIONS });
  if (values.generate)
    return generate(Number(values.generate), values.out, Number(values.seed ?? generateDefaults.seed), Number(values.rate ?? generateDefaults.rate));
  if (!values.traffic) {
    process.stderr.write(SIMULATE_HELP);
    return 2;
  }
  const format = values.format as (typeof TRAFFIC_FORMATS)[number];
  if (!TRAFFIC_FORMATS.includes(format)) throw new CliError(`--format must be ${TRAFFIC_FORMATS.join(', ')} (got "${values.format}")`, 2);
  const traffic = readableFile(values.traffic, 'the traffic log');
  const envoy = loadEnvoyCallSetup(readableFile(values.envoy ?? defaultEnvoyFile(), 'the Envoy config (--envoy)'));
  const assignments = readAssignments(values.tiers);
  const dirs = [values.config, ...(values.compare ? [values.compare] : [])];
  const configs = dirs.map((dir) => loadConfigDir(dir));
  const sims = configs.map((config) => new Simulation(config, envoy, assignments));
  await replay(traffic, sims, { format, skipBadLines: values['skip-bad-lines'] });
  const top = Number(values.top);
  const [a, b] = sims.map((s) => s.report(top));
  if (values.report) {
    const runs: ReportRun[] = sims.map((sim, i) => ({ name: dirs[i]!, report: [a!, b!][i]!, series: sim.series(), held: sim.heldSeries() }));
    writeReport(values.report, htmlReport(values.traffic, runs));
  }
  if (b) {
    const c = compare(a!, b);
    process.stdout.write(values.json ? `${JSON.stringify({ a, b, comparison: c }, null, 2)}\n` : formatComparison(c, values.config, values.compare!));
  } else {
    process.stdout.write(values.json ? `${JSON.stringify(a, null, 2)}\n` : formatSimulation(a!));
  }
  return 0;
}

function writeReport(file: string, html: string): void {
  try {
    writeFileSync(file, html);
  } catch (err) {
    throw new CliError(`cannot write the report ${file}: ${systemCause(err)}`);
  }
}

async function generate(lines: number, out: string | undefined, seed: number, rate: number): Promise<number> {
  if (!Number.isInteger(lines) || lines <= 0) throw new CliError('--generate takes a number of lines', 2);
  const sink = out ? await openForWriting(out) : process.stdout;
  for (const line of generateTraffic({ ...generateDefaults, lines, seed, rate })) {
    if (!sink.write(`${line}\n`)) await new Promise<void>((r) => sink.once('drain', () => r()));
  }
  if (out) await new Promise((r) => (sink as ReturnType<typeof createWriteStream>).end(r));
  return 0;
}

/** A write stream once the file is open, or one line saying why it cannot be (no 'error' event later). */
function openForWriting(file: string): Promise<ReturnType<typeof createWriteStream>> {
  return new Promise((resolve, reject) => {
    const stream = createWriteStream(file);
    stream.once('error', (err) => reject(new CliError(`cannot write ${file}: ${systemCause(err)}`)));
    stream.once('open', () => {
      // Later failures (a full disk) end the command with the same one line.
      stream.on('error', (err) => {
        process.stderr.write(`tollgate: cannot write ${file}: ${systemCause(err)}\n`);
        process.exit(1);
      });
      resolve(stream);
    });
  });
}

export const EXPLAIN_OPTIONS = {
  config: { type: 'string' },
  url: { type: 'string' },
  tiers: { type: 'string' },
  hits: { type: 'string' },
  json: { type: 'boolean', default: false },
  log: { type: 'string' },
  client: { type: 'string' },
  'trace-id': { type: 'string' },
  over: { type: 'boolean', default: false },
  last: { type: 'string' },
  bucket: { type: 'boolean', default: false },
} as const;

export async function explainCommand(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({ args, allowPositionals: true, strict: true, options: EXPLAIN_OPTIONS });
  if (values.log !== undefined) return explainFromLog(values.log, values);
  const where = configOrUrl(values);
  if (values.bucket) return explainBucket(positionals, { ...values, config: where.config ?? DEFAULT_CONFIG });
  const [domain, ...pairs] = positionals;
  if (!domain || pairs.length === 0) {
    process.stderr.write(EXPLAIN_HELP);
    return 2;
  }
  const descriptors: DescriptorInput[] = [{ entries: [] }];
  for (const p of pairs) {
    if (p === '+') descriptors.push({ entries: [] });
    else addToDescriptor(descriptors.at(-1)!, p);
  }
  const hits = values.hits === undefined ? 1 : wholeNumber(values.hits, '--hits');
  const request = { domain, descriptors: descriptors.filter((d) => d.entries.length > 0), hits: hits > 0 ? hits : 1 };
  let e: Explanation;
  if (where.url !== undefined) e = await explainViaService(where.url, request);
  else {
    const { config, tiers } = explainInputs({ ...values, config: where.config ?? DEFAULT_CONFIG });
    // The user typed this request: its text is shown back (but the token's value, a fingerprint as everywhere).
    e = await explain(config, tiers, request, { reveal: true });
  }
  process.stdout.write(values.json ? `${JSON.stringify(e, null, 2)}\n` : formatExplanation(e));
  return 0;
}

const DEFAULT_CONFIG = './config';

/** A config directory to read, or a running service to ask (--url). Under CONFIG_TYPE=GRPC_XDS_SOTW, with
 * neither given, there is no directory worth reading: one line says how to ask the service. */
function configOrUrl(o: { config?: string; url?: string; tiers?: string; bucket: boolean }): { config?: string; url?: string } {
  if (o.url === undefined) {
    const hint = o.config === undefined ? xdsHint(process.env) : undefined;
    if (hint) throw new CliError(hint, 2);
    return { config: o.config };
  }
  if (o.config !== undefined || o.tiers !== undefined || o.bucket)
    throw new CliError('--url asks the running service, which has its own config and tiers: leave out --config, --tiers and --bucket', 2);
  return { url: o.url };
}

/** What both kinds of explain read: the config directory (--config) and the tier assignments (--tiers). */
function explainInputs(o: { config: string; tiers?: string }): { config: CompiledConfig; tiers: TierSource } {
  const byFingerprint = new Map(readAssignments(o.tiers).map((a) => [a.fingerprint, a.tier]));
  if (!existsSync(o.config)) throw new CliError(`${o.config}: no such file or directory (--config)`);
  return { config: loadConfigDir(o.config), tiers: { tierOf: (fp: string) => byFingerprint.get(fp) } };
}

/** `explain --bucket`: an RLQS BucketId, as the quota service plans it (src/rlqs/quota/bucket-plan.ts), then the
 * explanation of the descriptor it becomes. */
async function explainBucket(positionals: string[], o: { config: string; tiers?: string; json: boolean }): Promise<number> {
  const [domain, ...pairs] = positionals;
  if (!domain || pairs.length === 0) {
    process.stderr.write(EXPLAIN_HELP);
    return 2;
  }
  const bucket: Record<string, string> = {};
  for (const p of pairs) {
    const at = p.indexOf('=');
    if (at <= 0 || p.startsWith('@') || p === '+') throw new CliError(`"${p.slice(0, 40)}" is not key=value (a BucketId is one map of pairs)`, 2);
    bucket[p.slice(0, at)] = p.slice(at + 1);
  }
  const { config, tiers } = explainInputs(o);
  const plan = planBucket(config, domain, bucket, { tiers, reportIntervalMs: 5000, unmatched: 'allow', globalShadow: false });
  const e = await explain(config, tiers, { domain, descriptors: [{ entries: bucketEntries(config.domains.get(domain), bucket) }], hits: 1 }, { reveal: true });
  // The token's value is shown as its fingerprint, as everywhere else; the rest as typed.
  const tokenKey = config.domains.get(domain)?.tokenKey;
  const b = bucketExplanation(plan, (x) => (x.key === tokenKey ? { key: x.key, value: `fingerprint:${fingerprint(x.value)}` } : x));
  if (o.json) process.stdout.write(`${JSON.stringify({ bucket: b, explanation: e }, null, 2)}\n`);
  else process.stdout.write(formatBucket(b) + formatExplanation(e));
  return 0;
}

/** `explain --log`: the decision lines of a client or a trace, newest last, and what to run next. */
async function explainFromLog(file: string, o: { client?: string; 'trace-id'?: string; over: boolean; last?: string; json: boolean }): Promise<number> {
  const last = o.last === undefined ? 20 : wholeNumber(o.last, '--last');
  const found = await findDecisions(readableFile(file, 'decision log (--log)'), { client: o.client, traceId: o['trace-id'], overOnly: o.over }, last);
  if (o.json) {
    process.stdout.write(`${JSON.stringify(found.lines)}\n`);
    return found.matched > 0 ? 0 : 1;
  }
  if (found.decisions === 0) {
    process.stderr.write(
      `${file}: no decision lines among ${found.other} lines (the service writes them with DECISION_LOG=over or all, as JSON: LOG_FORMAT=json)\n`,
    );
    return 1;
  }
  if (found.matched === 0) {
    process.stderr.write(
      `no decision matches among ${found.decisions} (check the token or fingerprint, the trace id, or log all decisions with DECISION_LOG=all)\n`,
    );
    return 1;
  }
  process.stdout.write(`${found.matched} decision${found.matched === 1 ? '' : 's'} match${found.matched > last ? `; the last ${last}` : ''}:\n`);
  for (const l of found.lines) process.stdout.write(`${formatDecision(l)}\n`);
  const blocked = [...found.lines].reverse().find((l) => l.code === 'OVER_LIMIT' && l.domain);
  if (blocked)
    process.stdout.write(
      `\nWhy that rule and limit apply: tollgate explain ${blocked.domain} key=value … (the descriptor Envoy sent, e.g. category=… token=…)\n`,
    );
  return 0;
}

/** One explain argument: key=value, or what Envoy adds to a descriptor (@limit=N/UNIT, @hits=N). */
function addToDescriptor(d: DescriptorInput, arg: string): void {
  const at = arg.indexOf('=');
  if (at <= 0) throw new CliError(`"${arg.slice(0, 40)}" is not key=value`, 2);
  const [key, value] = [arg.slice(0, at), arg.slice(at + 1)];
  // @hits=-N: Envoy's hits_addend N with is_negative_hits (a refund, or an in-flight give-back).
  if (key === '@hits' && value.startsWith('-')) {
    d.hits = wholeNumber(value.slice(1), '@hits');
    d.refund = true;
  } else if (key === '@hits') d.hits = wholeNumber(value, '@hits');
  else if (key === '@limit') {
    const m = /^(\d+)\/(\w+)$/.exec(value);
    const unit = m ? parseUnit(m[2]!) : undefined;
    if (!m || !unit) throw new CliError(`@limit takes N/UNIT, e.g. @limit=5/minute (units: ${UNIT_NAMES.join(', ')})`, 2);
    d.override = { requestsPerUnit: wholeNumber(m[1]!, '@limit'), unit };
  } else d.entries.push({ key, value });
}

function wholeNumber(text: string, what: string): number {
  const n = Number(text);
  if (!/^\d+$/.test(text) || n > MAX_UINT32) throw new CliError(`${what} takes a whole number from 0 to ${MAX_UINT32}`, 2);
  return n;
}
