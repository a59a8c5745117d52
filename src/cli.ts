#!/usr/bin/env node
import { parseArgs } from 'node:util';
import type { CompiledDomain, CompiledLimit } from './config/compiled.js';
import { ConfigError } from './config/errors.js';
import { loadConfigDir } from './config/load.js';
import { fingerprint } from './fingerprint.js';
import { createLogger } from './logger.js';
import { startService } from './service.js';
import { parseServeArgs, serveHelp, SettingsError } from './settings.js';

const USAGE = `Usage: tollgate <command> [options]

Commands:
  serve               run the rate-limit service (gRPC + HTTP)
  check-config DIR    validate a descriptor config directory and list its rules
  fingerprint TOKEN   print the fingerprint that identifies TOKEN in keys, logs and the admin API

Run 'tollgate <command> --help' for a command's options.
`;

const HELP: Record<string, string> = {
  'check-config': `Usage: tollgate check-config DIR\n\nValidates every YAML file in DIR as a reload would, prints each domain's rules,\nand exits 1 with file:line:column: key: problem for each error.\n`,
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
  const { positionals } = parseArgs({ args, allowPositionals: true, strict: true, options: {} });
  const dir = positionals[0];
  if (positionals.length !== 1 || !dir) {
    process.stderr.write(HELP['check-config']!);
    return 2;
  }
  try {
    const config = loadConfigDir(dir);
    if (config.domains.size === 0) {
      process.stderr.write(`${dir}: no .yaml or .yml files\n`);
      return 1;
    }
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

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    if (err instanceof SettingsError || (err as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')) {
      process.stderr.write(`tollgate: ${(err as Error).message}\n`);
      process.exit(2);
    }
    process.stderr.write(`tollgate: ${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  },
);
