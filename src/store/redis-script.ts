import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Cluster, type Redis } from 'ioredis';
import { EncodedCommand, encodeCommand } from './resp-command.js';

/** check-and-incr.lua with its parts in place: each `--#include <file>` line is that file of lua/ (the script
 * Redis runs is one text, kept in files of one thing each). */
function luaScript(file: string): string {
  const text = readFileSync(new URL(`./lua/${file}`, import.meta.url), 'utf8');
  return text.replace(/^--#include (\S+)$/gm, (_, part: string) => luaScript(part));
}

/** A script's text and the SHA1 Redis caches it by. */
export interface LuaScript {
  text: string;
  sha: string;
}

export function scriptOf(text: string): LuaScript {
  return { text, sha: createHash('sha1').update(text).digest('hex') };
}

/** EVALSHA, and EVAL when Redis does not have the script yet (a new or restarted server): `send` sends the
 * command named with the script's SHA1 or text. The one place that decides when a script is sent whole. */
async function withScript<T>(script: LuaScript, send: (command: 'evalsha' | 'eval', body: string) => unknown): Promise<T> {
  try {
    return (await send('evalsha', script.sha)) as T;
  } catch (err) {
    if (!(err as Error).message?.startsWith('NOSCRIPT')) throw err;
    return (await send('eval', script.text)) as T;
  }
}

/** A script through ioredis's own commands. `args`: the keys and then the arguments, `numKeys` of them keys. */
export function runScript<T>(client: Redis | Cluster, script: LuaScript, numKeys: number, args: (string | number)[]): Promise<T> {
  return withScript(script, (command, body) => (command === 'evalsha' ? client.evalsha(body, numKeys, ...args) : client.eval(body, numKeys, ...args)));
}

/** runScript on one server's connection, its arguments (`numKeys`, then the lists in turn) written in RESP at once
 * (resp-command.ts), not copied into one list and encoded by ioredis argument by argument. */
function runEncoded<T>(node: Redis, script: LuaScript, numKeys: number, ...lists: (string | number)[][]): Promise<T> {
  return withScript(script, (command, body) => node.sendCommand(new EncodedCommand(command, encodeCommand(command, [body, numKeys], ...lists))));
}

/** The scripts of renewed slots (redis-slot-leases.ts): a peer's list, and the renewal of one counter's holders.
 * slot-note.lua lists the census's counters too (redis-slot-census.ts): a bounded hash either way. */
export const SLOT_NOTE_SCRIPT = scriptOf(luaScript('slot-note.lua'));
export const SLOT_RENEW_SCRIPT = scriptOf(luaScript('slot-renew.lua'));
/** One in_flight counter counted where it is (redis-slot-census.ts). */
export const SLOT_CENSUS_SCRIPT = scriptOf(luaScript('slot-census.lua'));
/** Entries of a list dropped only if unchanged since read (a census's empty counters, a renewal's gone slots). */
export const CENSUS_DROP_SCRIPT = scriptOf(luaScript('census-drop.lua'));

/** The script every decision batch runs (redis-batch.ts writes its arguments and reads its reply). */
export const CHECK_SCRIPT = scriptOf(luaScript('check-and-incr.lua'));

/** The batch's one MGET, the flag that says the script runs on one Cluster master, and where its keys are: the
 * lines the Cluster variant replaces. */
const MGET_LINE = "  local got = call('MGET', unpack(names))";
const ON_NODE_LINE = 'local on_node = false';
const KEYS_LINE = 'local K, k_at, last_arg = KEYS, 0, #ARGV';

/** The same script for one Redis Cluster master and keys of any of its slots (a batch per node, not per slot):
 * Redis 7's `allow-cross-slot-keys` lets a script reach undeclared keys of every slot its node serves, while
 * the keys it declares must share one slot. So it declares none: the keys come in ARGV after the arguments,
 * their count last, and the batch's reads are one GET each (an MGET across slots is refused) before anything
 * is written. A key this node does not serve (a slot moved or moving) found by those reads ends the script
 * there, having written nothing, with the error NOTLOCAL; found by a plain request's INCRBY (which reads
 * nothing up front), it ends the batch at that request, its own increments taken back, and the reply says
 * NOTLOCAL in its place. Either way the caller sends the requests not decided slot by slot, through the
 * client's redirects. A key of another type reads as absent, as MGET reads it. */
function clusterVariant(script: string): string {
  for (const line of [MGET_LINE, ON_NODE_LINE, KEYS_LINE])
    if (!script.includes(line)) throw new Error(`check-and-incr.lua's line "${line}" moved: redis-script.ts replaces it`);
  const reads = [
    '  local got = {}',
    '  for i = 1, m do',
    "    local v = redis.pcall('GET', names[i])",
    '    if type(v) == "table" and v.err then',
    "      if string.sub(v.err, 1, 9) ~= 'WRONGTYPE' then return redis.error_reply('NOTLOCAL ' .. v.err) end",
    '      v = false',
    '    end',
    '    got[i] = v',
    '  end',
  ].join('\n');
  const keys = 'local K, last_arg = ARGV, #ARGV - 1 - tonumber(ARGV[#ARGV])\nlocal k_at = last_arg';
  return `#!lua flags=allow-cross-slot-keys\n${script.replace(MGET_LINE, reads).replace(ON_NODE_LINE, 'local on_node = true').replace(KEYS_LINE, keys)}`;
}

/** The Cluster variant (see clusterVariant). */
export const CLUSTER_CHECK_SCRIPT = scriptOf(clusterVariant(CHECK_SCRIPT.text));

/** The decision script on one Redis, or through a Cluster client for keys of one slot. */
export function evalCheckScript(client: Redis | Cluster, keys: string[], args: (string | number)[]): Promise<(number | string)[]> {
  // A Cluster client routes a command by its keys, which an encoded command does not expose.
  if (client instanceof Cluster) return runScript(client, CHECK_SCRIPT, keys.length, [...keys, ...args]);
  return runEncoded(client, CHECK_SCRIPT, keys.length, keys, args);
}

/** The lean script for a batch of one plain request on one Redis (lua/one-plain.lua: its header is the
 * contract); its reply is check-and-incr.lua's for that request, or { now, "FULL" } when the full script must
 * decide it. */
export const ONE_PLAIN_SCRIPT = scriptOf(luaScript('one-plain.lua'));

/** One plain request through the lean script, falling back to the full one (`full`: its keys and arguments)
 * when the lean one would not decide it: the fallback's round trip happens only on a refused INCRBY. */
export async function evalOnePlain(client: Redis, keys: string[], args: (string | number)[], full: () => { keys: string[]; args: (string | number)[] }) {
  const reply = await runEncoded<(number | string)[]>(client, ONE_PLAIN_SCRIPT, keys.length, keys, args);
  if (reply[1] !== 'FULL') return reply;
  const batch = full();
  return runEncoded<(number | string)[]>(client, CHECK_SCRIPT, batch.keys.length, batch.keys, batch.args);
}

/** The Cluster variant on one master's connection, for keys of any of its slots. */
export function evalOnNode(node: Redis, keys: string[], args: (string | number)[]): Promise<(number | string)[]> {
  return runEncoded(node, CLUSTER_CHECK_SCRIPT, 0, args, keys, [keys.length]);
}

/** Whether a master cannot run the Cluster variant at all (Redis before 7 has no script flags): the store then
 * goes slot by slot for good. */
export function noScriptFlags(err: unknown): boolean {
  return /compiling script|shebang/i.test((err as Error)?.message ?? '');
}

/** Whether a per-node call failed before the script wrote anything, so its requests may go again slot by slot:
 * a key not (or no longer) that node's; a master demoted by a failover (READONLY), loading, or without a
 * quorum; over maxmemory (a script with flags is refused whole, where the slot path refuses writes key by key, as
 * on one Redis); a connection the client has just replaced. */
export function notLocal(err: unknown): boolean {
  const m = (err as Error)?.message ?? '';
  return /^(NOTLOCAL|MOVED|ASK|TRYAGAIN|CLUSTERDOWN|READONLY|LOADING|MASTERDOWN|OOM)\b/.test(m) || m === 'Connection is closed.';
}
