import { gunzipSync, inflateSync } from 'node:zlib';
import { status } from '@grpc/grpc-js';
import { BUSY, type Hold } from './byte-budget.js';

/** A gRPC message inflated within a hold (byte-budget.ts), on both servers: on this thread, one message at a time
 * and at most PER_TURN a turn, stopping at the receive limit (zlib's maxOutputLength), what it inflated to taken
 * from the hold before the message is handed on. grpc-js 1.14 inflates on libuv's threads, as many at once as
 * clients send, bounded by its receive limit alone; inflating on those threads here too, chunk by chunk, left RSS
 * 180 MiB up after three clients' gzip bombs (12 connections, 5 s) against 110 MiB this way, with the V8 heap and
 * external memory the same (round 5's soak). At the 256 KiB limit an inflation takes ~0.3–0.5 ms; a client whose
 * bombs are refused is cut off after 64 (hot-path.ts). */

/** Why an inflation stopped: past the receive limit, past the budget, or bytes that are not gzip/deflate. */
export type InflateFailure = 'too_large' | 'busy' | 'corrupt';

/** Inflations run in one turn of the event loop before the rest wait for the next: at ~0.3–0.5 ms each, a burst of
 * a client's bombs takes at most ~2 ms of a turn, and other clients' calls are read between. */
const PER_TURN = 4;
let thisTurn = 0;
let turnEnds = false;

/** A turn's slot for one inflation: now, or on a later turn. */
function slot(): Promise<void> {
  if (thisTurn < PER_TURN) {
    thisTurn++;
    if (!turnEnds) {
      turnEnds = true;
      setImmediate(() => {
        thisTurn = 0;
        turnEnds = false;
      });
    }
    return Promise.resolve();
  }
  return new Promise((resolve) => setImmediate(() => resolve(slot())));
}

export async function inflateWithin(message: Buffer, encoding: 'gzip' | 'deflate', hold: Hold, maxBytes: number): Promise<Buffer> {
  await slot();
  return inflateNow(message, encoding, hold, maxBytes);
}

function inflateNow(message: Buffer, encoding: 'gzip' | 'deflate', hold: Hold, maxBytes: number): Promise<Buffer> {
  let plain: Buffer;
  try {
    plain = (encoding === 'gzip' ? gunzipSync : inflateSync)(message, { maxOutputLength: maxBytes });
  } catch (err) {
    const tooLarge = err instanceof RangeError || (err as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE';
    return Promise.reject((tooLarge ? 'too_large' : 'corrupt') satisfies InflateFailure);
  }
  if (!hold.take(plain.length)) return Promise.reject('busy' satisfies InflateFailure);
  return Promise.resolve(plain);
}

/** A failed inflation as grpc-js 1.14 answers it (server-interceptors.js); past the budget, RESOURCE_EXHAUSTED too.
 * Both servers answer through this. */
export function inflateFailure(why: InflateFailure, maxBytes: number): { code: status; details: string } {
  if (why === 'too_large') return { code: status.RESOURCE_EXHAUSTED, details: `Received message that decompresses to a size larger than ${maxBytes}` };
  if (why === 'busy') return { code: status.RESOURCE_EXHAUSTED, details: BUSY };
  return { code: status.INTERNAL, details: 'Failed to decompress message' };
}
