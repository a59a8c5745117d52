import type { Http2Session, ServerHttp2Stream } from 'node:http2';
import { createRequire } from 'node:module';
import { type ByteBudget, Hold } from './byte-budget.js';
import { type InflateFailure, inflateFailure, inflateWithin } from './inflate.js';
import { MAX_RLS_MESSAGE_BYTES } from './port-bounds.js';

/** The messages grpc-js inflates (RLQS, health; every method under GRPC_SERVER=grpc-js) taken from the port's byte
 * budget as the hot path's are (inflate.ts): grpc-js 1.14's BaseServerInterceptingCall.decompressMessage inflates
 * each message whole, bounded by its receive limit alone, as many at once as clients send. Its gzip and deflate are
 * replaced here, on the prototype, for the streams of a session whose port has a budget (`budgetSession`); the
 * answers keep grpc-js's statuses and words. The version is pinned in package-lock.json, and
 * test/integration/port-bounds.test.ts fails if the method is gone. */

interface InterceptingCall {
  stream: ServerHttp2Stream;
  maxReceiveMessageSize: number;
  decompressMessage(message: Buffer, encoding: string): Buffer | Promise<Buffer>;
}

const require = createRequire(import.meta.url);
const { BaseServerInterceptingCall } = require('@grpc/grpc-js/build/src/server-interceptors.js') as {
  BaseServerInterceptingCall: { prototype: InterceptingCall };
};

const budgets = new WeakMap<Http2Session, ByteBudget>();

/** What a compressed message may inflate to here: ShouldRateLimit's limit (port-bounds.ts), not grpc-js's 4 MiB.
 * Envoy compresses none of its gRPC calls; a bomb's inflation is what compression buys a client, and at 4 MiB each
 * refused one left 16 times the garbage (round 5's soak: RSS 330 MiB and not coming back under grpc-js). An RLQS
 * report sent uncompressed keeps the 4 MiB. */
const MAX_INFLATED_BYTES = MAX_RLS_MESSAGE_BYTES;

/** The sessions of a guarded port inflate within its budget. */
export function budgetSession(session: Http2Session, budget: ByteBudget): void {
  budgets.set(session, budget);
}

let patched = false;

export function inflateWithinBudgets(): void {
  if (patched) return;
  const proto = BaseServerInterceptingCall.prototype;
  const original = proto.decompressMessage;
  if (typeof original !== 'function') throw new Error('this grpc-js has no decompressMessage: its inflation cannot be bounded');
  patched = true;
  proto.decompressMessage = function (this: InterceptingCall, message: Buffer, encoding: string) {
    const session = this.stream.session;
    const budget = session && budgets.get(session);
    if (!budget || (encoding !== 'gzip' && encoding !== 'deflate')) return original.call(this, message, encoding);
    const hold = new Hold(budget, budget.ledger(session));
    const max = Math.min(MAX_INFLATED_BYTES, this.maxReceiveMessageSize === -1 ? Number.MAX_SAFE_INTEGER : this.maxReceiveMessageSize);
    return inflateWithin(message.subarray(5), encoding, hold, max).then(
      (plain) => {
        hold.release();
        return plain;
      },
      (why: InflateFailure) => {
        hold.release();
        throw inflateFailure(why, max);
      },
    );
  };
}
