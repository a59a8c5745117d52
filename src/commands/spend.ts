import { readFile, stat } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { AdminClient, type SpendWindowView } from '../control/admin-client.js';
import { CliError } from '../errors.js';
import { fingerprint } from '../fingerprint.js';
import type { Command } from './command.js';

/** The largest --names file read: a million tenant ids of 60 bytes, and a million ids at most. */
const MAX_NAMES_BYTES = 64 * 1024 * 1024;
const MAX_NAMES = 1_000_000;

const OPTIONS = {
  rule: { type: 'string' },
  domain: { type: 'string' },
  top: { type: 'string' },
  offset: { type: 'string' },
  names: { type: 'string' },
  url: { type: 'string' },
  json: { type: 'boolean' },
} as const;

const HELP = `Usage: tollgate spend top --rule NAME [--top N] [--offset K] [--domain D] [--names FILE] [--json]

Lists, per window of a charge_mode rule, the counters that have used the largest share of
their own limit (a tier's for a tenant in one), fullest first, as the store keeps them with
each charge (GET /v1/spend on the admin API; docs/spend.md).
  --rule NAME    the rule's descriptor path (every window), or a limit's name (its window)
  --top N        counters per window, 1 to 1000 (default 10); --offset K skips the first K
  --domain D     only this domain's rules of that name
  --names FILE   your own tenant ids, one per line: each listed fingerprint that is one of
                 theirs is shown as the id. Mapped here, on this machine: the ids never travel.
  --url URL      the service's admin port (env TOLLGATE_URL, default http://127.0.0.1:8082)
  --json         print the API's JSON answer (fingerprints replaced by names with --names)
The admin credential comes from the environment: TOLLGATE_ADMIN_TOKEN.
`;

/** `tollgate spend top`: who is nearest their budget, from a running service's admin API. */
export const spendCommand: Command = { help: () => HELP, options: OPTIONS, run: spendTop };

async function spendTop(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({ args, allowPositionals: true, strict: true, options: OPTIONS });
  if (positionals.length !== 1 || positionals[0] !== 'top') throw new CliError('usage: tollgate spend top --rule NAME (tollgate spend --help)', 2);
  if (!values.rule) throw new CliError('--rule is required: a charge_mode rule (its descriptor path) or one of its limits, by name', 2);
  const credential = process.env.TOLLGATE_ADMIN_TOKEN;
  if (!credential) throw new CliError('set TOLLGATE_ADMIN_TOKEN to the admin credential of the service', 2);
  // Read first: a file that cannot be read fails before any call.
  const names = values.names === undefined ? undefined : await readNames(values.names);
  const client = new AdminClient(values.url ?? process.env.TOLLGATE_URL ?? 'http://127.0.0.1:8082', credential);
  const query = { rule: values.rule, domain: values.domain, top: values.top, offset: values.offset };
  const answer = await client.spend(query).catch((err: unknown) => {
    throw new CliError((err as Error).message);
  });
  const windows = answer.windows.map((w) => ({ ...w, counters: w.counters.map((c) => ({ ...c, counter: named(c.counter, names) })) }));
  process.stdout.write(values.json ? `${JSON.stringify({ ...answer, windows }, null, 2)}\n` : windows.map(text).join(''));
  return 0;
}

/** Fingerprint → tenant id, from the operator's file; bounded in size. */
async function readNames(file: string): Promise<Map<string, string>> {
  const size = await stat(file).then(
    (s) => s.size,
    (err: NodeJS.ErrnoException) => {
      throw new CliError(`cannot read --names ${file}: ${err.code ?? err.message}`, 2);
    },
  );
  if (size > MAX_NAMES_BYTES) throw new CliError(`--names ${file} is ${size} bytes: at most ${MAX_NAMES_BYTES} are read`, 2);
  const out = new Map<string, string>();
  for (const line of (await readFile(file, 'utf8')).split(/\r?\n/)) {
    if (line === '') continue;
    if (out.size >= MAX_NAMES) throw new CliError(`--names ${file} holds more than ${MAX_NAMES} ids: give the tenants you are looking for`, 2);
    out.set(fingerprint(line), line);
  }
  return out;
}

/** A counter's tag (its values' fingerprints, joined by '.'), each fingerprint that names a known tenant as its id. */
function named(tag: string, names: Map<string, string> | undefined): string {
  if (!names) return tag;
  return tag
    .split('.')
    .map((fp) => names.get(fp) ?? fp)
    .join('.');
}

function text(w: SpendWindowView): string {
  const head = `${w.domain}/${w.rule} per ${w.window} (${w.names.join(', ')}): limit ${w.limit}, ${w.listed} listed\n`;
  const rows = w.counters.map((c, i) => `  ${String(w.offset + i + 1).padStart(4)}. ${c.counter}  ${(c.share * 100).toFixed(1)}%\n`);
  return head + (rows.join('') || '  (none charged in this window)\n') + (w.next === null ? '' : `  more: --offset ${w.next}\n`);
}
