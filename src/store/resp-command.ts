import { Command } from 'ioredis';

/** A command encoded in RESP once, by the caller, for the decision batch: what ioredis does per argument
 * (Command's args.flat, stringifyArguments, then toWritable's Buffer.byteLength and string concatenation, then the
 * socket's UTF-8 encoding of that string) costs ~4 times this writer's work at the batch's 6 arguments a decision
 * (about 0.5 µs a decision on this machine). The bytes are exactly ioredis's for the same arguments
 * (test/unit/resp-command.test.ts holds them equal for random ones): a string as UTF-8, a number as String() writes it. */

/** Node's Buffer writers without the encoding lookup of `write(s, at, encoding)` (protobufjs writes with them too):
 * on Buffer.prototype in Node 20, 22 and 24, not declared by @types/node. */
type Writable = Buffer & { utf8Write(s: string, at: number): number; latin1Write(s: string, at: number): number };

/** Where commands are written before being copied out at their size; grows (doubles) for a larger one. */
let scratch = Buffer.allocUnsafe(64 * 1024) as Writable;
let at = 0;

function room(bytes: number): void {
  if (at + bytes <= scratch.length) return;
  const larger = Buffer.allocUnsafe(Math.max(scratch.length * 2, at + bytes)) as Writable;
  scratch.copy(larger, 0, 0, at);
  scratch = larger;
}

/** A decimal integer's digits, without a string for the usual small ones. */
function writeCount(n: number): void {
  if (n < 10) scratch[at++] = 48 + n;
  else at += scratch.latin1Write(String(n), at);
}

/** A bulk string: `$<bytes>\r\n<text>\r\n`. Written as if ASCII (its byte count its length, the usual case: keys
 * are fingerprints and config names); written again with its UTF-8 byte count when it is not. */
function writeString(s: string): void {
  room(3 * s.length + 16);
  const start = at;
  scratch[at++] = 36; // $
  writeCount(s.length);
  scratch[at++] = 13;
  scratch[at++] = 10;
  const bytes = scratch.utf8Write(s, at);
  if (bytes !== s.length) {
    at = start + 1;
    writeCount(Buffer.byteLength(s));
    scratch[at++] = 13;
    scratch[at++] = 10;
    at += scratch.utf8Write(s, at);
  } else at += bytes;
  scratch[at++] = 13;
  scratch[at++] = 10;
}

function writeArgument(a: string | number): void {
  if (typeof a === 'number' && a >= 0 && a < 10 && Number.isInteger(a)) {
    room(8);
    // `$1\r\n<digit>\r\n`
    scratch[at++] = 36;
    scratch[at++] = 49;
    scratch[at++] = 13;
    scratch[at++] = 10;
    scratch[at++] = 48 + a;
    scratch[at++] = 13;
    scratch[at++] = 10;
    return;
  }
  writeString(typeof a === 'string' ? a : numberText(a));
}

/** A number as ioredis writes an argument (utils' toArg): String(), but an integer past 2^53 in all its digits. */
function numberText(n: number): string {
  return Number.isInteger(n) && !Number.isSafeInteger(n) ? BigInt(n).toString() : String(n);
}

/** The RESP of a command: its name, then the arguments of each list in turn (no list is copied or joined). */
export function encodeCommand(name: string, ...lists: readonly (readonly (string | number)[])[]): Buffer {
  at = 0;
  let count = 1;
  for (const l of lists) count += l.length;
  room(16);
  scratch[at++] = 42; // *
  writeCount(count);
  scratch[at++] = 13;
  scratch[at++] = 10;
  writeString(name);
  for (const l of lists) for (const a of l) writeArgument(a);
  // A copy at its size: the socket may hold it past this call (a write libuv could not finish at once).
  const out = Buffer.allocUnsafe(at);
  scratch.copy(out, 0, 0, at);
  return out;
}

/** An ioredis command whose bytes are already written: ioredis queues it, times it out, matches its reply and
 * converts the reply to strings as for any command; it writes these bytes instead of encoding arguments. It has no
 * arguments of its own (so nothing of them reaches an error's `command` or a tracing subscriber), hence no keys:
 * only for a connection to one server (never through a Cluster client, which routes by a command's keys), and
 * ioredis's own `keyPrefix` and `showFriendlyErrorStack`, which the store never sets, would not apply to it. */
export class EncodedCommand extends Command {
  constructor(
    name: string,
    private readonly wire: Buffer,
  ) {
    super(name, [], { replyEncoding: 'utf8' });
  }

  override toWritable(): Buffer {
    return this.wire;
  }
}
