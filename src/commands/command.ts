/** A CLI command: its help (printed for --help, and on a usage error) and what it does. `run` returns the
 * exit code, or throws a UserError (src/errors.ts) that the CLI prints as one line. */
export interface Command {
  help: () => string;
  run: (args: string[]) => Promise<number> | number;
}
