import { mkdirSync } from 'node:fs';
import { hostname } from 'node:os';
import { parseArgs } from 'node:util';
import type { Cluster, Redis } from 'ioredis';
import { AdminClient } from '../control/admin-client.js';
import { UsageFiles, type UsageFormat, type Written } from '../control/usage-files.js';
import { CliError } from '../errors.js';
import { createClient, parseRedisUrl, redisAddress } from '../store/redis-connection.js';
import type { UsageEvent } from '../store/usage-ledger.js';
import { UsageStreams } from '../store/usage-streams.js';
import type { Command } from './command.js';

const OPTIONS = {
  group: { type: 'string' },
  out: { type: 'string' },
  format: { type: 'string' },
  follow: { type: 'boolean' },
  consumer: { type: 'string' },
  'redis-url': { type: 'string' },
  'redis-type': { type: 'string' },
  'redis-key-prefix': { type: 'string' },
  url: { type: 'string' },
  batch: { type: 'string' },
} as const;

/** Events read and written at once unless --batch says: each batch is one write and one sync to disk. */
const BATCH = 500;
const MAX_BATCH = 10_000;
/** --follow: how long a read waits for new events, and how often streams are looked for again. */
const WAIT_MS = 2000;
const REDISCOVER_MS = 30_000;
const GROUP_NAME = /^[A-Za-z0-9._-]{1,64}$/;

const HELP = `Usage: tollgate usage export --group NAME --out DIR [--format ndjson|csv] [--follow]

Exports the usage ledger (rules with \`usage\`: docs/spend.md#the-usage-ledger) to files in DIR,
each event once: read through the Redis consumer group NAME, written and synced to disk, then
acknowledged. An exporter stopped at any point and started again on the same DIR writes what it
had not written, and nothing twice.
  --group NAME        the consumer group (letters, digits, . _ -; made if missing, from the first event)
  --out DIR           the directory of the export's files (usage-<time>-….ndjson or .csv)
  --format F          ndjson (default) or csv
  --follow            keep exporting as events come (SIGTERM or SIGINT ends it after a batch)
  --consumer NAME     this exporter's name in the group (default: the host name)
  --batch N           events read, written and synced at once, 1 to ${MAX_BATCH} (default ${BATCH})
  --redis-url URL     the service's Redis (env REDIS_URL, default redis://127.0.0.1:6379)
  --redis-type T      single, sentinel or cluster (env REDIS_TYPE, default single)
  --redis-key-prefix P  the service's REDIS_KEY_PREFIX (default tollgate:)
  --url URL           a service with the memory store: read its ledger through the admin API
                      (TOLLGATE_ADMIN_TOKEN) instead of Redis
`;

export const usageCommand: Command = { help: () => HELP, options: OPTIONS, run: exportUsage };

interface Run {
  batch: number;
  files: UsageFiles;
  written: Written;
  follow: boolean;
  stopped: () => boolean;
  counts: { written: number; skipped: number; trimmed: number };
}

async function exportUsage(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({ args, allowPositionals: true, strict: true, options: OPTIONS });
  if (positionals.length !== 1 || positionals[0] !== 'export')
    throw new CliError('usage: tollgate usage export --group NAME --out DIR (tollgate usage --help)', 2);
  if (!values.out) throw new CliError('--out DIR is required: the export writes its files there, and reads them again on a restart', 2);
  const format = (values.format ?? 'ndjson') as UsageFormat;
  if (format !== 'ndjson' && format !== 'csv') throw new CliError('--format is ndjson or csv', 2);
  mkdirSync(values.out, { recursive: true });
  const files = new UsageFiles(values.out, format);
  let stop = false;
  const end = () => (stop = true);
  process.once('SIGTERM', end).once('SIGINT', end);
  const batch = Number(values.batch ?? BATCH);
  if (!Number.isInteger(batch) || batch < 1 || batch > MAX_BATCH) throw new CliError(`--batch is a whole number from 1 to ${MAX_BATCH}`, 2);
  const run: Run = {
    batch,
    files,
    written: files.written(),
    follow: values.follow ?? false,
    stopped: () => stop,
    counts: { written: 0, skipped: 0, trimmed: 0 },
  };
  try {
    if (values.url) await fromAdmin(values.url, run);
    else {
      if (!values.group || !GROUP_NAME.test(values.group)) throw new CliError('--group NAME is required: 1 to 64 letters, digits, ".", "_" or "-"', 2);
      await fromRedis(values, values.group, run);
    }
  } finally {
    files.close();
  }
  const { written, skipped, trimmed } = run.counts;
  const lost = trimmed > 0 ? `; ${trimmed} pending were trimmed at the ledger's bound before they were written` : '';
  process.stderr.write(`tollgate: exported ${written} usage events (${skipped} found already written, acknowledged${lost})\n`);
  return 0;
}

/** Redis: this consumer's pending events first (written already, or not), then new ones, per stream. */
async function fromRedis(values: { 'redis-url'?: string; 'redis-type'?: string; 'redis-key-prefix'?: string; consumer?: string }, group: string, run: Run) {
  const type = values['redis-type'] ?? process.env.REDIS_TYPE ?? 'single';
  if (type !== 'single' && type !== 'cluster' && type !== 'sentinel') throw new CliError('--redis-type is single, sentinel or cluster', 2);
  const connection = parseRedisUrl(values['redis-url'] ?? process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', type);
  const client = createClient(connection, { commandTimeoutMs: 10_000, sentinelPassword: process.env.REDIS_SENTINEL_PASSWORD });
  const s = new UsageStreams(client, values['redis-key-prefix'] ?? process.env.REDIS_KEY_PREFIX ?? 'tollgate:');
  const consumer = values.consumer ?? hostname();
  try {
    await ready(client, redisAddress(connection));
    let streams: string[] = [];
    let foundAt = 0;
    do {
      if (Date.now() - foundAt >= REDISCOVER_MS) {
        streams = await s.streams();
        for (const stream of streams) await s.join(stream, group);
        for (const stream of streams) await drainPending(s, stream, group, consumer, run);
        foundAt = Date.now();
      }
      const events = await s.next(streams, group, consumer, run.batch, run.follow ? WAIT_MS : 0);
      run.files.write(events);
      run.counts.written += events.length;
      await acknowledge(s, group, events);
      if (events.length === 0 && !run.follow) break;
      // Several streams are read without blocking (one call each): a pause when none had any.
      if (events.length === 0 && streams.length !== 1) await new Promise((r) => setTimeout(r, WAIT_MS));
    } while (!run.stopped());
  } catch (err) {
    if (err instanceof CliError) throw err;
    throw new CliError(`the export stopped: ${(err as Error).message} (what was written is acknowledged or will be found on the next run)`);
  } finally {
    client.disconnect();
  }
}

/** Waits for the connection (commands are not queued while it is not there). */
function ready(client: Redis | Cluster, address: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new CliError(`cannot reach Redis at ${address}: no connection within 10 s`)), 10_000);
    client.once('ready', () => {
      clearTimeout(timer);
      resolve();
    });
  });
}

/** Events delivered to this consumer (or claimed from one that died) and not acknowledged: those the files hold
 * are acknowledged only; the rest written, then acknowledged; those the bound trimmed meanwhile, acknowledged
 * and counted. */
async function drainPending(s: UsageStreams, stream: string, group: string, consumer: string, run: Run): Promise<void> {
  let from = '0';
  for (;;) {
    const { events, gone } = await s.pending(stream, group, consumer, run.batch, from);
    if (events.length + gone.length === 0) return;
    const fresh = events.filter((e) => !run.written.has(e.stream, e.id));
    run.files.write(fresh);
    run.counts.written += fresh.length;
    run.counts.skipped += events.length - fresh.length;
    run.counts.trimmed += gone.length;
    const ids = [...events.map((e) => e.id), ...gone].sort(byId);
    await s.ack(stream, group, ids);
    from = ids.at(-1)!;
  }
}

/** Acknowledges events written (each on its own stream), then drops from those streams what every group has. */
async function acknowledge(s: UsageStreams, group: string, events: readonly UsageEvent[]): Promise<void> {
  const byStream = new Map<string, string[]>();
  for (const e of events) byStream.set(e.stream, [...(byStream.get(e.stream) ?? []), e.id]);
  for (const [name, ids] of byStream) {
    await s.ack(s.keyOf(name), group, ids);
    await s.trimExported(s.keyOf(name));
  }
}

/** Stream ids in order (`<ms>-<seq>`). */
function byId(a: string, b: string): number {
  const [am, as] = a.split('-').map(Number);
  const [bm, bs] = b.split('-').map(Number);
  return am! - bm! || as! - bs!;
}

/** The memory store's ring, through the admin API: after the last event the files hold of its stream (a
 * restarted service's ring is a new stream, read from its first). */
async function fromAdmin(url: string, run: Run): Promise<void> {
  const credential = process.env.TOLLGATE_ADMIN_TOKEN;
  if (!credential) throw new CliError('set TOLLGATE_ADMIN_TOKEN to the admin credential of the service', 2);
  const client = new AdminClient(url, credential);
  const read = (after: number) =>
    client.usage(after, run.batch).then(checked(run.batch), (err: unknown) => {
      throw new CliError((err as Error).message);
    });
  let after = run.written.lastNumbered((await read(0)).stream);
  do {
    const { events } = await read(after);
    run.files.write(events);
    run.counts.written += events.length;
    if (events.length > 0) after = Number(events.at(-1)!.id);
    else if (!run.follow) break;
    else await new Promise((r) => setTimeout(r, WAIT_MS));
  } while (!run.stopped());
}

type UsagePage = Awaited<ReturnType<AdminClient['usage']>>;

/** The admin API's answer, as this command asked for it: a stream name, at most `count` events of it, numbered. */
function checked(count: number): (a: UsagePage) => UsagePage {
  return (a) => {
    const ok =
      typeof a?.stream === 'string' &&
      Array.isArray(a.events) &&
      a.events.length <= count &&
      a.events.every((e) => e?.stream === a.stream && /^\d{1,15}$/.test(String(e.id)));
    if (!ok) throw new CliError('the admin API answered something that is not a page of the usage ledger: is --url a Tollgate admin port?');
    return a;
  };
}
