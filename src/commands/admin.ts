import { parseArgs } from 'node:util';
import { AdminClient, toFingerprint } from '../control/admin-client.js';
import { CliError } from '../errors.js';
import type { Command } from './command.js';

const ADMIN_HELP = `Talks to a running service's admin API.
  --url URL     the service's admin port (env TOLLGATE_URL, default http://127.0.0.1:8082)
  --json        print the API's JSON answer
  --token       TOKEN_OR_FINGERPRINT is a token (a tenant id), however it looks
  --fingerprint TOKEN_OR_FINGERPRINT is a fingerprint (32 or 64 hex characters, as tiers list prints)
The admin credential comes from the environment: TOLLGATE_ADMIN_TOKEN.
TOKEN_OR_FINGERPRINT: a token (its "Bearer " scheme ignored), or with --fingerprint its fingerprint. Hex text of
31 to 64 characters needs --token or --fingerprint: a tenant id and a fingerprint can look the same.
`;

/** The flags of `tiers`; `inspect` also takes --reset. */
const TIERS_OPTIONS = { url: { type: 'string' }, json: { type: 'boolean' }, token: { type: 'boolean' }, fingerprint: { type: 'boolean' } } as const;
const INSPECT_OPTIONS = { ...TIERS_OPTIONS, reset: { type: 'boolean' } } as const;

/** `tollgate tiers …` and `tollgate inspect …`: calls to a running service's admin API. */
export const tiersCommand: Command = {
  help: () =>
    `Usage: tollgate tiers assign TOKEN_OR_FINGERPRINT TIER\n       tollgate tiers remove TOKEN_OR_FINGERPRINT\n       tollgate tiers ` +
    `list\n\n${ADMIN_HELP}`,
  options: TIERS_OPTIONS,
  run: (args) => admin('tiers', args),
};

export const inspectCommand: Command = {
  help: () => `Usage: tollgate inspect TOKEN_OR_FINGERPRINT [--reset]\n\nShows the client's tier and its counters; --reset deletes them.\n${ADMIN_HELP}`,
  options: INSPECT_OPTIONS,
  run: (args) => admin('inspect', args),
};

/** The admin verbs and the arguments each takes after it. */
const ADMIN_VERBS: Record<string, { args: number; usage: string }> = {
  assign: { args: 2, usage: 'tiers assign TOKEN_OR_FINGERPRINT TIER' },
  remove: { args: 1, usage: 'tiers remove TOKEN_OR_FINGERPRINT' },
  list: { args: 0, usage: 'tiers list' },
  inspect: { args: 1, usage: 'inspect TOKEN_OR_FINGERPRINT [--reset]' },
};

async function admin(command: string, args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({ args, allowPositionals: true, strict: true, options: INSPECT_OPTIONS });
  if (command === 'tiers' && values.reset !== undefined) throw new CliError("'--reset' is inspect's option, not tiers'", 2);
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
  if (values.token && values.fingerprint) throw new CliError('--token and --fingerprint say opposite things: pass one', 2);
  const as = values.token ? 'token' : values.fingerprint ? 'fingerprint' : undefined;
  const fp = rest[0] === undefined || verb === 'list' ? '' : toFingerprint(rest[0], as);
  const [data, text] = await runAdmin(client, verb, fp, rest[1], values.reset ?? false).catch((err: unknown) => {
    throw new CliError((err as Error).message);
  });
  process.stdout.write(values.json ? `${JSON.stringify(data, null, 2)}\n` : text);
  // An assignment no rule uses is stored, but changes nothing: said, and not a success.
  const rules = (data as { rules?: string[] }).rules;
  if (verb === 'assign' && rules?.length === 0) {
    process.stderr.write(`tollgate: no rule has tier_limits for tier ${rest[1]}: the assignment changes no limit until one does\n`);
    return 1;
  }
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
    return [a, `${a.fingerprint} → ${a.tier}${a.rules?.length ? ` (${a.rules.join(', ')})` : ''}\n`];
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
