import { createGunzip, createInflate } from 'node:zlib';
import type { Hold } from './byte-budget.js';

/** A gRPC message inflated within a hold (byte-budget.ts), on both servers: zlib's state is taken first, then each
 * chunk of output as zlib gives it (16 KiB at most past the budget, no chunk after the one refused), so concurrent
 * small messages take what they inflate to and a bomb stops at the receive limit or the budget, whichever comes
 * first. grpc-js 1.14 inflates with no bound but its receive limit, each message whole in memory. */

/** What an inflation holds beside its output: zlib's window (32 KiB) and state. */
const ZLIB_STATE_BYTES = 48 * 1024;

/** Why an inflation stopped: past the receive limit, past the budget, or bytes that are not gzip/deflate. */
export type InflateFailure = 'too_large' | 'busy' | 'corrupt';

export function inflateWithin(message: Buffer, encoding: 'gzip' | 'deflate', hold: Hold, maxBytes: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    if (!hold.take(ZLIB_STATE_BYTES)) return reject('busy' satisfies InflateFailure);
    const z = encoding === 'gzip' ? createGunzip() : createInflate();
    const parts: Buffer[] = [];
    let total = 0;
    let stopped = false;
    const stop = (why: InflateFailure): void => {
      if (stopped) return;
      stopped = true;
      z.destroy();
      parts.length = 0;
      reject(why);
    };
    z.on('data', (chunk: Buffer) => {
      if (stopped) return;
      total += chunk.length;
      if (total > maxBytes) stop('too_large');
      else if (!hold.take(chunk.length)) stop('busy');
      else parts.push(chunk);
    });
    z.on('error', () => stop('corrupt'));
    z.on('end', () => {
      if (!stopped) resolve(parts.length === 1 ? parts[0]! : Buffer.concat(parts, total));
    });
    z.end(message);
  });
}
