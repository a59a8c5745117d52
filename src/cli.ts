#!/usr/bin/env node
import { reexecWithHeapFlags } from './heap-flags.js';

// Before the commands are loaded: a re-execution then costs one bare Node start, not two loads of every module.
if (process.argv[2] === 'serve') reexecWithHeapFlags();

const { COMMANDS } = await import('./commands/index.js');
const { UserError } = await import('./errors.js');
const { VERSION } = await import('./version.js');
const { ownedByLogSink } = await import('./log-sink.js');

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
  spend top --rule NAME [--top N] [--names FILE]
                      the tenants nearest their budget on a charge_mode rule, fingerprints mapped to your
                      own tenant ids on this machine (admin API)
  usage export --group NAME --out DIR [--format ndjson|csv] [--follow]
                      export the usage ledger (rules with usage) to files, each event once
  simulate --traffic FILE [--compare DIR2] [--report FILE.html] | simulate --generate N
                      replay a traffic log through a config offline; compare two configs; make a sample log
  explain DOMAIN key=value … | explain --url http://HOST:8080 DOMAIN key=value …
                      which rule a descriptor matches and why, which limits and tier apply (--url: ask
                      the running service, whose config may come from xDS)

Run 'tollgate <command> --help' for a command's options; 'tollgate --version' for the version.
`;

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
  const load = Object.hasOwn(COMMANDS, command) ? COMMANDS[command] : undefined;
  if (!load) {
    process.stderr.write(`tollgate: unknown command "${command.slice(0, 40)}"\n\n${USAGE}`);
    return 2;
  }
  const cmd = await load();
  if (rest.includes('--help') || rest.includes('-h')) {
    process.stdout.write(cmd.help());
    return 0;
  }
  return cmd.run(rest);
}

/** A reader that goes away (`tollgate simulate --generate 10 | head -2`) ends the command quietly, as it
 * ends any Unix tool, instead of crashing on EPIPE. Not `serve`: its log sink takes these errors, and a
 * service keeps serving when its log reader goes away (src/log-sink.ts). */
for (const stream of [process.stdout, process.stderr]) {
  stream.on('error', (err: NodeJS.ErrnoException) => {
    if (ownedByLogSink(stream)) return;
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
