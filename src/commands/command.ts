import type { ParseArgsConfig } from 'node:util';

/** A CLI command: its help (printed for --help, and on a usage error), its flags and what it does. `run` returns
 * the exit code, or throws a UserError (src/errors.ts) that the CLI prints as one line. */
export interface Command {
  help: () => string;
  /** The flags `run` accepts, as node:util's parseArgs reads them: the one list its help and docs/cli.md are held
   * to (test/unit/docs-cli.test.ts). */
  options: NonNullable<ParseArgsConfig['options']>;
  run: (args: string[]) => Promise<number> | number;
}
