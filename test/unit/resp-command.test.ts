import { Command } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { EncodedCommand, encodeCommand } from '../../src/store/resp-command.js';
import { Rng } from '../adversarial/fuzz-lib.js';

/** ioredis's own encoding of a command (what the socket receives when it writes toWritable's string as UTF-8): the
 * reference the batch's writer must equal byte for byte. */
function reference(name: string, args: (string | number)[]): Buffer {
  const w = new Command(name, args, { replyEncoding: 'utf8' }).toWritable({});
  return typeof w === 'string' ? Buffer.from(w, 'utf8') : w;
}

/** Buffers compared at once (a deep equality of megabytes byte by byte takes seconds); shown as text when they differ. */
function expectSame(got: Buffer, want: Buffer, what = ''): void {
  if (!got.equals(want)) expect(got.toString('latin1'), what).toBe(want.toString('latin1'));
}

const SEED = Number(process.env.RESP_SEED ?? 20261126);

/** Strings of every kind the writer treats apart: ASCII, two- and three-byte characters, astral pairs, a lone
 * surrogate (UTF-8's replacement character, three bytes), empty, and long ones (lengths of several digits). */
function randomString(r: () => number): string {
  const kinds = [() => 'a', () => 'é', () => '€', () => '😀', () => '\ud800', () => String.fromCharCode(Math.floor(r() * 128))];
  const n = r() < 0.1 ? Math.floor(r() * 5000) : Math.floor(r() * 40);
  let s = '';
  const kind = r() < 0.7 ? [kinds[0]!, kinds[5]!] : kinds;
  for (let i = 0; i < n; i++) s += kind[Math.floor(r() * kind.length)]!();
  return s;
}

function randomNumber(r: () => number): number {
  const kinds = [
    () => Math.floor(r() * 10),
    () => Math.floor(r() * 1e13),
    () => -Math.floor(r() * 100),
    () => r() * 100,
    () => -0,
    () => 4e9,
    () => 2 ** 53,
    // Integers past 2^53, which ioredis writes in all their digits, and past 1e21, which String() writes as 1e+21.
    () => 2 ** 64,
    () => 1e21 * (1 + Math.floor(r() * 100)),
  ];
  return kinds[Math.floor(r() * kinds.length)]!();
}

describe('the decision batch RESP writer', () => {
  it('writes exactly the bytes ioredis writes, for 2,000 random commands', () => {
    const rng = new Rng(SEED);
    const r = (): number => rng.next();
    for (let i = 0; i < 2000; i++) {
      const lists = Array.from({ length: 1 + Math.floor(r() * 3) }, () =>
        Array.from({ length: Math.floor(r() * 30) }, () => (r() < 0.5 ? randomString(r) : randomNumber(r))),
      );
      expectSame(encodeCommand('evalsha', ...lists), reference('evalsha', lists.flat()), `seed ${SEED}, command ${i}`);
    }
  });

  it('grows past its scratch buffer for one command of megabytes, and writes the next one from the start', () => {
    const big = ['k'.repeat(200_000), '€'.repeat(300_000), 7];
    expectSame(encodeCommand('eval', big), reference('eval', big));
    expectSame(encodeCommand('evalsha', ['x', 1]), reference('evalsha', ['x', 1]));
  });

  it('hands ioredis the written bytes, and each command keeps its own (a later command does not overwrite them)', () => {
    const first = new EncodedCommand('evalsha', encodeCommand('evalsha', ['sha', 1, 'key']));
    const before = Buffer.from(first.toWritable());
    new EncodedCommand('evalsha', encodeCommand('evalsha', ['other', 2, 'k1', 'k2']));
    expectSame(first.toWritable(), before);
    expectSame(first.toWritable(), reference('evalsha', ['sha', 1, 'key']));
    // No arguments of its own: nothing of a batch (keys, counts) reaches an error's `command`.
    expect(first.args).toEqual([]);
  });
});
