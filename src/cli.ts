#!/usr/bin/env node
import { existsSync } from 'node:fs';
import { parseArgs } from 'node:util';
import type { CompiledDomain, CompiledLimit } from './config/compiled.js';
import { ConfigError } from './config/errors.js';
import { configLimits, loadConfigDir, NO_CONFIG_WARNING } from './config/load.js';
import { AdminClient, toFingerprint } from './control/admin-client.js';
import { CliError, ListenError, UserError } from './errors.js';
import { fingerprint } from './fingerprint.js';
import { createLogger } from './logger.js';
import { logSettingNotes, startService } from './service.js';
import { maxConfigBytesOf, parseServeArgs, serveHelp } from './settings.js';
import { parseBool } from './settings-compat.js';
import { EXPLAIN_HELP, explainCommand, SIMULATE_HELP, simulateCommand } from './tuning/commands.js';
import { VERSION } from './version.js';
import { isWorker, runPrimary } from './workers.js';

/** The longest token `fingerprint -` reads: the longest value a request may carry (--max-value-bytes). */
const MAX_STDIN_TOKEN_BYTES = 65_536;

const USAGE = `Usage: tollgate <command> [options]

Commands:
  serve               run the rate-limit service (gRPC + HTTP)
  check-config PATH   validate a descriptor config directory (or one file) and list its rules
  fingerprint [TOKEN | -]
                      print the fingerprint that identifies TOKEN in keys, logs and the admin API
                      (-, or no TOKEN with stdin not a terminal: read it from stdin, out of shell history)
  tiers assign TOKEN_OR_FINGERPRINT TIER | tiers remove TOKEN_OR_FINGERPRINT | tiers list
                      change tier assignments of a running service (admin API)
  inspect TOKEN_OR_FINGERPRINT [--reset]
                      a client's tier and current counters per category and window (--reset: zero them)
  simulate --traffic FILE [--compare DIR2] [--report FILE.html] | simulate --generate N
                      replay a traffic log through a config offline; compare two configs; make a sample log
  explain DOMAIN key=value …
                      which rule a descriptor matches and why, which limits and tier apply

Run 'tollgate <command> --help' for a command's options; 'tollgate --version' for the version.
`;

const ADMIN_HELP = `Talks to a running service's admin API.
  --url URL     the service's admin port (env TOLLGATE_URL, default http://127.0.0.1:8082)
  --json        print the API's JSON answer
  --token       TOKEN_OR_FINGERPRINT is a token, even if it looks like hex
The admin credential comes from the environment: TOLLGATE_ADMIN_TOKEN.
TOKEN_OR_FINGERPRINT: a token (its "Bearer " scheme ignored) or its fingerprint (32 or 64 hex characters).
A hex string of another length from 31 to 63 is refused as a mistyped fingerprint unless --token is given.
`;

const HELP: Record<string, string> = {
  simulate: SIMULATE_HELP,
  explain: EXPLAIN_HELP,
  tiers:
    `Usage: tollgate tiers assign TOKEN_OR_FINGERPRINT TIER\n       tollgate tiers remove TOKEN_OR_FINGERPRINT\n       tollgate tiers ` +
    `list\n\n${ADMIN_HELP}`,
  inspect: `Usage: tollgate inspect TOKEN_OR_FINGERPRINT [--reset]\n\nShows the client's tier and its counters; --reset deletes them.\n${ADMIN_HELP}`,
  'check-config':
    `Usage: tollgate check-config [--max-config-bytes N] [--merge-domain-config] DIR_OR_FILE\n\nValidates every YAML file in DIR (or ` +
    `the one FILE) as serve would load it, prints each\ndomain's rules and the config hash (of file names and contents: the same files give ` +
    `the\nsame hash wherever they are), and exits 1 with file:line:column: key: problem for each\nerror. A directory with no .yaml or .yml file ` +
    `passes with a warning, as serve starts on\nit (a reload that would empty a running config is refused). --max-config-bytes ` +
    `(env\nMAX_CONFIG_BYTES) and --merge-domain-config (env MERGE_DOMAIN_CONFIG) as for serve.\n`,
  fingerprint:
    `Usage: tollgate fingerprint TOKEN\n       tollgate fingerprint -          (or no TOKEN, with stdin not a terminal)\n\nPrints the ` +
    `SHA-256 fingerprint (first 32 hex characters) of TOKEN, with any\n"Bearer " scheme stripped. Use it wherever Tollgate names a client. With ` +
    `-, the token\nis read from stdin (one line; at most ${MAX_STDIN_TOKEN_BYTES} bytes), so it stays out of argv and shell\nhistory: tollgate ` +
    `fingerprint - < token.txt\n`,
};

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (command === undefined || command === '--help' || command === '-h' || command === 'help') {
    process.stdout.write(USAGE);
    return command === undefined ? 2 : 0;
  }
  if (command === '--version' || command === '-V' || command === 'version') {
    process.stdout.write(`tollgate ${VERSION}\n`);
    return 0;
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
  const logger = createLogger(settings.logLevel, settings.logFormat);
  if (settings.workers > 1 && !isWorker()) {
    logSettingNotes(settings, logger); // once, not once per worker (a worker does not log them)
    return runPrimary(settings.workers, logger);
  }
  let service: Awaited<ReturnType<typeof startService>>;
  try {
    service = await startService(settings, { logger });
  } catch (err) {
    if (err instanceof ConfigError) {
      logger.fatal({ problems: err.problems }, 'descriptor config is invalid');
      process.stderr.write(`${err.message}\n`);
      return 1;
    }
    if (err instanceof ListenError) {
      logger.fatal({ err: err.message }, 'cannot start');
      process.stderr.write(`tollgate: ${err.message}\n`);
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
  const options = { 'max-config-bytes': { type: 'string' }, 'merge-domain-config': { type: 'boolean' } } as const;
  const { values, positionals } = parseArgs({ args, allowPositionals: true, strict: true, options });
  const path = positionals[0];
  if (positionals.length !== 1 || !path) {
    process.stderr.write(HELP['check-config']!);
    return 2;
  }
  if (!existsSync(path)) throw new CliError(`${path}: no such file or directory`);
  try {
    const merge = values['merge-domain-config'] ?? parseBool(process.env.MERGE_DOMAIN_CONFIG ?? '', 'MERGE_DOMAIN_CONFIG');
    const config = loadConfigDir(path, configLimits(maxConfigBytesOf(values['max-config-bytes']), merge));
    // The same rule as serve, which starts on an empty directory with this warning.
    if (config.domains.size === 0) process.stderr.write(`tollgate: warning: ${path}: ${NO_CONFIG_WARNING}\n`);
    for (const domain of config.domains.values()) {
      for (const note of domain.notes) process.stderr.write(`tollgate: warning: ${note}\n`);
      process.stdout.write(describeDomain(domain));
    }
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
    const flags = [
      r.algorithm,
      r.shadow ? 'shadow' : '',
      r.quota ? 'quota_mode' : '',
      r.unlimited ? 'unlimited' : '',
      r.variable.some((v) => !v) && r.id.includes('*') ? 'shared' : '',
    ]
      .filter(Boolean)
      .join(', ');
    const text = (l: CompiledLimit): string => limitText(l, r.algorithm);
    lines.push(`  ${r.id}  ${r.unlimited ? 'unlimited' : r.limits.map(text).join(' + ')}  [${flags}]  ${r.source}`);
    for (const [tier, limits] of r.tierLimits) lines.push(`    tier ${tier}: ${limits.map(text).join(' + ')}`);
  }
  return `${lines.join('\n')}\n`;
}

/** A limit, with its own algorithm when it is not its rule's (a token bucket beside a fixed window). */
function limitText(l: CompiledLimit, ruleAlgorithm: string): string {
  const own = l.algorithm === ruleAlgorithm ? '' : ` (${l.algorithm}${l.burst > 0 ? `, burst ${l.burst}` : ''})`;
  return `${l.requestsPerUnit}/${l.unit}${own}`;
}

async function printFingerprint(args: string[]): Promise<number> {
  const { positionals } = parseArgs({ args, allowPositionals: true, strict: true, options: {} });
  const fromStdin = positionals[0] === '-' || (positionals.length === 0 && !process.stdin.isTTY);
  if (positionals.length > 1 || (positionals.length === 0 && !fromStdin)) {
    process.stderr.write(HELP.fingerprint!);
    return 2;
  }
  const token = fromStdin ? await readStdinToken() : positionals[0]!;
  process.stdout.write(`${fingerprint(token)}\n`);
  return 0;
}

/** One token from stdin: the text up to the first line break, at most MAX_STDIN_TOKEN_BYTES read. */
async function readStdinToken(): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of process.stdin as AsyncIterable<Buffer>) {
    chunks.push(chunk);
    size += chunk.length;
    if (size > MAX_STDIN_TOKEN_BYTES + 2) throw new CliError(`the token on stdin is longer than ${MAX_STDIN_TOKEN_BYTES} bytes`);
  }
  const token = Buffer.concat(chunks).toString('utf8').split(/\r?\n/)[0]!;
  if (token === '') throw new CliError('no token on stdin (give it as: tollgate fingerprint - < file)', 2);
  return token;
}

/** The admin verbs and the arguments each takes after it. */
const ADMIN_VERBS: Record<string, { args: number; usage: string }> = {
  assign: { args: 2, usage: 'tiers assign TOKEN_OR_FINGERPRINT TIER' },
  remove: { args: 1, usage: 'tiers remove TOKEN_OR_FINGERPRINT' },
  list: { args: 0, usage: 'tiers list' },
  inspect: { args: 1, usage: 'inspect TOKEN_OR_FINGERPRINT [--reset]' },
};

async function admin(command: string, args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    strict: true,
    options: { url: { type: 'string' }, json: { type: 'boolean' }, reset: { type: 'boolean' }, token: { type: 'boolean' } },
  });
  const [verb, ...rest] = command === 'inspect' ? ['inspect', ...positionals] : positionals;
  const known = verb === undefined ? undefined : ADMIN_VERBS[verb];
  if (verb === undefined || !known || (verb === 'inspect') !== (command === 'inspect')) {
    if (verb === undefined) throw new CliError(`tiers needs a subcommand: assign, remove or list (tollgate tiers --help)`, 2);
    throw new CliError(`unknown tiers subcommand "${verb.slice(0, 40)}": use assign, remove or list (tollgate tiers --help)`, 2);
  }
  if (rest.length !== known.args) throw new CliError(`usage: tollgate ${known.usage} (tollgate ${command} --help)`, 2);
  const credential = process.env.TOLLGATE_ADMIN_TOKEN;
  if (!credential) throw new CliError('set TOLLGATE_ADMIN_TOKEN to the admin credential of the service', 2);
  const client = new AdminClient(values.url ?? process.env.TOLLGATE_URL ?? 'http://127.0.0.1:8082', credential);
  // Refused before any call: a mistyped fingerprint must not reach the service.
  const fp = rest[0] === undefined || verb === 'list' ? '' : toFingerprint(rest[0], values.token);
  const [data, text] = await runAdmin(client, verb, fp, rest[1], values.reset ?? false).catch((err: unknown) => {
    throw new CliError((err as Error).message);
  });
  process.stdout.write(values.json ? `${JSON.stringify(data, null, 2)}\n` : text);
  return 0;
}

/** One admin call: the API's answer, and the text printed without --json. */
async function runAdmin(client: AdminClient, verb: string, fp: string, tier: string | undefined, reset: boolean): Promise<[unknown, string]> {
  if (verb === 'list') {
    const { assignments } = await client.list();
    return [{ assignments }, assignments.map((a) => `${a.fingerprint}  ${a.tier}  ${a.assignedAt}  by ${a.by}\n`).join('') || 'no assignments\n'];
  }
  if (verb === 'assign') {
    const a = await client.assign(fp, tier!);
    return [a, `${a.fingerprint} → ${a.tier}\n`];
  }
  if (verb === 'remove') {
    const r = await client.remove(fp);
    return [r, `${r.fingerprint} → no tier\n`];
  }
  if (reset) {
    const r = await client.resetCounters(fp);
    return [r, `${fp}: ${r.reset} windows reset (${r.existed} held counts)\n`];
  }
  const v = await client.inspect(fp);
  const rows = v.counters.map(
    (c) => `  ${c.domain}/${c.rule}  per ${c.window}: ${c.used}/${c.limit} used, ${c.remaining} left, resets ${new Date(c.resetAt * 1000).toISOString()}`,
  );
  return [v, `${v.fingerprint}  tier: ${v.tier ?? '(none)'}\n${rows.join('\n')}\n`];
}

/** A reader that goes away (`tollgate simulate --generate 10 | head -2`) ends the command quietly, as it
 * ends any Unix tool, instead of crashing on EPIPE. */
for (const stream of [process.stdout, process.stderr]) {
  stream.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code === 'EPIPE') process.exit(0);
    throw err;
  });
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    // A flag node:util's parseArgs refused is a command line that is wrong, as a SettingsError is.
    if (err instanceof UserError || (err as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')) {
      process.stderr.write(`tollgate: ${(err as Error).message}\n`);
      process.exit(err instanceof UserError ? err.exitCode : 2);
    }
    process.stderr.write(`tollgate: ${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  },
);
