import { parseArgs } from 'node:util';
import { CliError } from '../errors.js';
import { fingerprint } from '../fingerprint.js';
import type { Command } from './command.js';

/** The longest token `fingerprint -` reads: the longest value a request may carry (--max-value-bytes). */
const MAX_STDIN_TOKEN_BYTES = 65_536;

const HELP =
  `Usage: tollgate fingerprint TOKEN\n       tollgate fingerprint -          (or no TOKEN, with stdin not a terminal)\n\nPrints the ` +
  `SHA-256 fingerprint (first 32 hex characters) of TOKEN, with any\n"Bearer " scheme stripped. Use it wherever Tollgate names a client. With ` +
  `-, the token\nis read from stdin (one line; at most ${MAX_STDIN_TOKEN_BYTES} bytes), so it stays out of argv and shell\nhistory: tollgate ` +
  `fingerprint - < token.txt\n`;

/** `tollgate fingerprint`: the fingerprint that names a client in keys, logs and the admin API. */
export const fingerprintCommand: Command = { help: () => HELP, options: {}, run: printFingerprint };

async function printFingerprint(args: string[]): Promise<number> {
  const { positionals } = parseArgs({ args, allowPositionals: true, strict: true, options: {} });
  const fromStdin = positionals[0] === '-' || (positionals.length === 0 && !process.stdin.isTTY);
  if (positionals.length > 1 || (positionals.length === 0 && !fromStdin)) {
    process.stderr.write(HELP);
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
