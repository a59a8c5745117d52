import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { Cluster, Redis } from 'ioredis';

/** check-and-incr.lua with its parts in place: each `--#include <file>` line is that file of lua/ (the script
 * Redis runs is one text, kept in files of one thing each). */
function luaScript(file: string): string {
  const text = readFileSync(new URL(`./lua/${file}`, import.meta.url), 'utf8');
  return text.replace(/^--#include (\S+)$/gm, (_, part: string) => luaScript(part));
}

/** The script every decision batch runs (redis-batch.ts writes its arguments and reads its reply). */
export const CHECK_SCRIPT = luaScript('check-and-incr.lua');
const CHECK_SHA = createHash('sha1').update(CHECK_SCRIPT).digest('hex');

/** EVALSHA, and EVAL when Redis does not have the script yet (a new or restarted server). */
export async function evalCheckScript(client: Redis | Cluster, keys: string[], args: (string | number)[]): Promise<(number | string)[]> {
  try {
    return (await client.evalsha(CHECK_SHA, keys.length, ...keys, ...args)) as (number | string)[];
  } catch (err) {
    if (!(err as Error).message?.startsWith('NOSCRIPT')) throw err;
    return (await client.eval(CHECK_SCRIPT, keys.length, ...keys, ...args)) as (number | string)[];
  }
}
