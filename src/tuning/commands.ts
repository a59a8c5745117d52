import { createWriteStream, existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { EntryLike } from '../config/match.js';
import { loadConfigDir } from '../config/load.js';
import type { TierAssignment } from '../control/tier-store.js';
import { loadEnvoyConfig } from '../envoy/routes.js';
import { explain } from './explain.js';
import { generateDefaults, generateTraffic } from './generate.js';
import { compare, formatComparison, formatExplanation, formatSimulation } from './report.js';
import { Simulation } from './simulate.js';
import { readTraffic } from './traffic.js';

export const SIMULATE_HELP = `Usage: tollgate simulate --traffic FILE [--config DIR] [--envoy FILE] [--compare DIR2] [--tiers FILE] [--top N] [--json]
       tollgate simulate --generate N [--out FILE] [--seed S] [--rate R]

Replays a traffic log through Tollgate's own matching and limiter code on a virtual clock, and reports per
rule: requests, admitted, rejected, peak per-second use, and the most limited tokens (by fingerprint).
  --traffic FILE   JSON lines or CSV: timestamp (ISO or Unix s/ms), method, path, and authorization or
                   fingerprint; Envoy JSON access-log names (start_time, method, path) work too
  --config DIR     descriptor config (default ./config)
  --envoy FILE     routes → descriptors, as Envoy builds them (default envoy/envoy.yaml, else the bundled one)
  --compare DIR2   replay the same traffic under a second config and show the difference rule by rule
  --tiers FILE     tier assignments, as 'tollgate tiers list --json' prints them
  --generate N     write N lines of realistic property-API traffic (stdout, or --out FILE)
`;

export const EXPLAIN_HELP = `Usage: tollgate explain [--config DIR] [--tiers FILE] [--json] DOMAIN key=value [key=value …] [+ key=value …]

Shows which rule each descriptor matches and why (exact value, wildcard, the key's default), the tier and
limits that apply, replaced limits, and which window a burst runs into first. '+' starts another descriptor.
On a running service, POST /explain with a RateLimitRequest as JSON adds the live counters.
`;

/** The envoy.yaml in the working directory, else the one shipped with Tollgate. */
function defaultEnvoyFile(): string {
  const local = join(process.cwd(), 'envoy', 'envoy.yaml');
  return existsSync(local) ? local : fileURLToPath(new URL('../../envoy/envoy.yaml', import.meta.url));
}

function readAssignments(file: string | undefined): TierAssignment[] {
  if (!file) return [];
  const data = JSON.parse(readFileSync(file, 'utf8')) as { assignments?: TierAssignment[] } | TierAssignment[];
  return Array.isArray(data) ? data : (data.assignments ?? []);
}

export async function simulateCommand(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    strict: true,
    options: {
      traffic: { type: 'string' },
      config: { type: 'string', default: './config' },
      envoy: { type: 'string' },
      compare: { type: 'string' },
      tiers: { type: 'string' },
      top: { type: 'string', default: '10' },
      json: { type: 'boolean', default: false },
      generate: { type: 'string' },
      out: { type: 'string' },
      seed: { type: 'string' },
      rate: { type: 'string' },
    },
  });
  if (values.generate) return generate(Number(values.generate), values.out, Number(values.seed ?? generateDefaults.seed), Number(values.rate ?? generateDefaults.rate));
  if (!values.traffic) {
    process.stderr.write(SIMULATE_HELP);
    return 2;
  }
  const envoy = loadEnvoyConfig(values.envoy ?? defaultEnvoyFile());
  const assignments = readAssignments(values.tiers);
  const sims = [new Simulation(loadConfigDir(values.config), envoy, assignments)];
  if (values.compare) sims.push(new Simulation(loadConfigDir(values.compare), envoy, assignments));
  const total = statSync(values.traffic).size;
  const progress = process.stderr.isTTY
    ? (bytes: number) => process.stderr.write(`\rreplaying ${values.traffic}: ${Math.round((100 * bytes) / total)}%`)
    : undefined;
  for await (const line of readTraffic(values.traffic, progress)) {
    for (const sim of sims) await sim.feed(line);
  }
  if (progress) process.stderr.write('\r\x1b[K');
  const top = Number(values.top);
  const [a, b] = sims.map((s) => s.report(top));
  if (b) {
    const c = compare(a!, b);
    process.stdout.write(values.json ? `${JSON.stringify({ a, b, comparison: c }, null, 2)}\n` : formatComparison(c, values.config, values.compare!));
  } else {
    process.stdout.write(values.json ? `${JSON.stringify(a, null, 2)}\n` : formatSimulation(a!));
  }
  return 0;
}

async function generate(lines: number, out: string | undefined, seed: number, rate: number): Promise<number> {
  if (!Number.isInteger(lines) || lines <= 0) {
    process.stderr.write('tollgate: --generate takes a number of lines\n');
    return 2;
  }
  const sink = out ? createWriteStream(out) : process.stdout;
  for (const line of generateTraffic({ ...generateDefaults, lines, seed, rate })) {
    if (!sink.write(`${line}\n`)) await new Promise<void>((r) => sink.once('drain', () => r()));
  }
  if (out) await new Promise((r) => (sink as ReturnType<typeof createWriteStream>).end(r));
  return 0;
}

export async function explainCommand(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    strict: true,
    options: { config: { type: 'string', default: './config' }, tiers: { type: 'string' }, json: { type: 'boolean', default: false } },
  });
  const [domain, ...pairs] = positionals;
  if (!domain || pairs.length === 0) {
    process.stderr.write(EXPLAIN_HELP);
    return 2;
  }
  const descriptors: EntryLike[][] = [[]];
  for (const p of pairs) {
    if (p === '+') {
      descriptors.push([]);
      continue;
    }
    const at = p.indexOf('=');
    if (at <= 0) {
      process.stderr.write(`tollgate: "${p.slice(0, 40)}" is not key=value\n`);
      return 2;
    }
    descriptors.at(-1)!.push({ key: p.slice(0, at), value: p.slice(at + 1) });
  }
  const byFingerprint = new Map(readAssignments(values.tiers).map((a) => [a.fingerprint, a.tier]));
  const e = await explain(loadConfigDir(values.config), { tierOf: (fp) => byFingerprint.get(fp) }, domain, descriptors.filter((d) => d.length > 0));
  process.stdout.write(values.json ? `${JSON.stringify(e, null, 2)}\n` : formatExplanation(e));
  return 0;
}
