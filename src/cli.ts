#!/usr/bin/env node
import { parseArgs } from 'node:util';
import type { CompiledDomain, CompiledLimit } from './config/compiled.js';
import { ConfigError } from './config/errors.js';
import { configLimits, loadConfigDir, NO_CONFIG_WARNING } from './config/load.js';
import { AdminClient, toFingerprint } from './control/admin-client.js';
import { fingerprint } from './fingerprint.js';
import { EnvoyConfigError } from './envoy/routes.js';
import { EXPLAIN_HELP, explainCommand, SIMULATE_HELP, simulateCommand } from './tuning/commands.js';
import { TrafficError } from './tuning/traffic.js';
import { createLogger } from './logger.js';
import { startService } from './service.js';
import { maxConfigBytesOf, parseServeArgs, serveHelp, SettingsError } from './settings.js';

const USAGE = `Usage: tollgate <command> [options]

Commands:
  serve               run the rate-limit service (gRPC + HTTP)
  check-config DIR    validate a descriptor config directory and list its rules
  fingerprint TOKEN   print the fingerprint that identifies TOKEN in keys, logs and the admin API
  tiers assign TOKEN_OR_FINGERPRINT TIER | tiers remove TOKEN_OR_FINGERPRINT | tiers list
                      change tier assignments of a running service (admin API)
  inspect TOKEN_OR_FINGERPRINT [--reset]
                      a client's tier and current counters per category and window (--reset: zero them)
  simulate --traffic FILE [--compare DIR2] | simulate --generate N
                      replay a traffic log through a config offline; compare two configs; make a sample log
  explain DOMAIN key=value …
                      which rule a descriptor matches and why, which limits and tier apply

Run 'tollgate <command> --help' for a command's options.
`;

const ADMIN_HELP = `Talks to a running service's admin API.
  --url URL     the service's admin port (env TOLLGATE_URL, default http://127.0.0.1:8082)
  --json        print the API's JSON answer
The admin credential comes from the environment: TOLLGATE_ADMIN_TOKEN.
TOKEN_OR_FINGERPRINT: a token (its "Bearer " scheme ignored) or its fingerprint (32 or 64 hex characters).
`;

const HELP: Record<string, string> = {
  simulate: SIMULATE_HELP,
  explain: EXPLAIN_HELP,
  tiers: `Usage: tollgate tiers assign TOKEN_OR_FINGERPRINT TIER\n       tollgate tiers remove TOKEN_OR_FINGERPRINT\n       tollgate tiers list\n\n${ADMIN_HELP}`,
  inspect: `Usage: tollgate inspect TOKEN_OR_FINGERPRINT [--reset]\n\nShows the client's tier and its counters; --reset deletes them.\n${ADMIN_HELP}`,
  'check-config': `Usage: tollgate check-config [--max-config-bytes N] DIR\n\nValidates every YAML file in DIR as serve would load it, prints each domain's rules,\nand exits 1 with file:line:column: key: problem for each error. A directory with no\n.yaml or .yml file passes with a warning, as serve starts on it (a reload that would\nempty a running config is refused). --max-config-bytes (env MAX_CONFIG_BYTES) as for serve.\n`,
  fingerprint: `Usage: tollgate fingerprint TOKEN\n\nPrints the SHA-256 fingerprint (first 32 hex characters) of TOKEN, with any\n"Bearer " scheme stripped. Use it wherever Tollgate names a client.\n`,
};

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (command === undefined || command === '--help' || command === '-h' || command === 'help') {
    process.stdout.write(USAGE);
    return command === undefined ? 2 : 0;
  }
  if (rest.includes('--help') || rest.includes('-h')) {
    const help = command === 'serve' ? serveHelp() : HELP[command];
    if (help) {
      process.stdout.write(help);
      return 0;
    }
  }
  switch (command) {
    case 'serve':
      return serve(rest);
    case 'check-config':
      return checkConfig(rest);
    case 'fingerprint':
      return printFingerprint(rest);
    case 'tiers':
    case 'inspect':
      return admin(command, rest);
    case 'simulate':
      return simulateCommand(rest);
    case 'explain':
      return explainCommand(rest);
    default:
      process.stderr.write(`tollgate: unknown command "${command}"\n\n${USAGE}`);
      return 2;
  }
}

async function serve(args: string[]): Promise<number> {
  const settings = parseServeArgs(args);
  const logger = createLogger(settings.logLevel);
  let service;
  try {
    service = await startService(settings, { logger });
  } catch (err) {
    if (err instanceof ConfigError) {
      logger.fatal({ problems: err.problems }, 'descriptor config is invalid');
      process.stderr.write(`${err.message}\n`);
      return 1;
    }
    throw err;
  }
  const running = service;
  let stopping = false;
  const stop = (signal: string): void => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'shutting down');
    running.stop().then(
      () => process.exit(0),
      (err: unknown) => {
        logger.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  return new Promise<number>(() => {});
}

function checkConfig(args: string[]): number {
  const { values, positionals } = parseArgs({ args, allowPositionals: true, strict: true, options: { 'max-config-bytes': { type: 'string' } } });
  const dir = positionals[0];
  if (positionals.length !== 1 || !dir) {
    process.stderr.write(HELP['check-config']!);
    return 2;
  }
  try {
    const config = loadConfigDir(dir, configLimits(maxConfigBytesOf(values['max-config-bytes'])));
    // The same rule as serve, which starts on an empty directory with this warning.
    if (config.domains.size === 0) process.stderr.write(`tollgate: warning: ${dir}: ${NO_CONFIG_WARNING}\n`);
    for (const domain of config.domains.values()) process.stdout.write(describeDomain(domain));
    process.stdout.write(`OK: ${config.domains.size} domain(s), config hash ${config.hash}\n`);
    return 0;
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    process.stderr.write(`${err.message}\n${err.problems.length} problem(s); nothing loaded.\n`);
    return 1;
  }
}

function describeDomain(d: CompiledDomain): string {
  const lines = [`domain ${d.name} (${d.file}), headers: ${d.headers.style}${d.tiers.size ? `, tiers: ${[...d.tiers].join(', ')}` : ''}`];
  for (const r of d.rules) {
    const flags = [r.algorithm, r.shadow ? 'shadow' : '', r.unlimited ? 'unlimited' : ''].filter(Boolean).join(', ');
    lines.push(`  ${r.id}  ${r.unlimited ? 'unlimited' : r.limits.map(limitText).join(' + ')}  [${flags}]  ${r.source}`);
    for (const [tier, limits] of r.tierLimits) lines.push(`    tier ${tier}: ${limits.map(limitText).join(' + ')}`);
  }
  return `${lines.join('\n')}\n`;
}

function limitText(l: CompiledLimit): string {
  return `${l.requestsPerUnit}/${l.unit}`;
}

function printFingerprint(args: string[]): number {
  const { positionals } = parseArgs({ args, allowPositionals: true, strict: true, options: {} });
  if (positionals.length !== 1) {
    process.stderr.write(HELP.fingerprint!);
    return 2;
  }
  process.stdout.write(`${fingerprint(positionals[0]!)}\n`);
  return 0;
}

async function admin(command: string, args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    strict: true,
    options: { url: { type: 'string' }, json: { type: 'boolean' }, reset: { type: 'boolean' } },
  });
  const token = process.env.TOLLGATE_ADMIN_TOKEN;
  if (!token) {
    process.stderr.write('tollgate: set TOLLGATE_ADMIN_TOKEN to the admin credential of the service\n');
    return 2;
  }
  const client = new AdminClient(values.url ?? process.env.TOLLGATE_URL ?? 'http://127.0.0.1:8082', token);
  const print = (data: unknown, text: string): number => {
    process.stdout.write(values.json ? `${JSON.stringify(data, null, 2)}\n` : text);
    return 0;
  };
  const [verb, target, tier] = command === 'inspect' ? ['inspect', positionals[0], undefined] : positionals;
  try {
    if (verb === 'list' && positionals.length === 1) {
      const { assignments } = await client.list();
      return print({ assignments }, assignments.map((a) => `${a.fingerprint}  ${a.tier}  ${a.assignedAt}  by ${a.by}\n`).join('') || 'no assignments\n');
    }
    if (verb === 'assign' && target && tier && positionals.length === 3) {
      const a = await client.assign(toFingerprint(target), tier);
      return print(a, `${a.fingerprint} → ${a.tier}\n`);
    }
    if (verb === 'remove' && target && positionals.length === 2) {
      const r = await client.remove(toFingerprint(target));
      return print(r, `${r.fingerprint} → no tier\n`);
    }
    if (verb === 'inspect' && target && positionals.length === 1) {
      const fp = toFingerprint(target);
      if (values.reset) {
        const r = await client.resetCounters(fp);
        return print(r, `${fp}: ${r.reset} windows reset (${r.existed} held counts)\n`);
      }
      const v = await client.inspect(fp);
      const rows = v.counters.map((c) => `  ${c.domain}/${c.rule}  per ${c.window}: ${c.used}/${c.limit} used, ${c.remaining} left, resets ${new Date(c.resetAt * 1000).toISOString()}`);
      return print(v, `${v.fingerprint}  tier: ${v.tier ?? '(none)'}\n${rows.join('\n')}\n`);
    }
  } catch (err) {
    process.stderr.write(`tollgate: ${(err as Error).message}\n`);
    return 1;
  }
  process.stderr.write(HELP[command]!);
  return 2;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    if (err instanceof SettingsError || (err as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')) {
      process.stderr.write(`tollgate: ${(err as Error).message}\n`);
      process.exit(2);
    }
    // Problems in the user's files: the message says where; a stack trace would only hide it.
    if (err instanceof ConfigError || err instanceof TrafficError || err instanceof EnvoyConfigError) {
      process.stderr.write(`tollgate: ${err.message}\n`);
      process.exit(1);
    }
    process.stderr.write(`tollgate: ${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  },
);
