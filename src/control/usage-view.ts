import { InvalidRequestError } from '../errors.js';
import { MAX_USAGE_READ, type MemoryUsageLedger } from '../store/memory-usage-ledger.js';

/** `GET /v1/usage?after=N&count=M` on the admin port: the memory store's ledger events numbered after N (at most
 * M, up to MAX_USAGE_READ), oldest first, with the oldest the ring still holds and the newest written; what
 * `tollgate usage export --url` reads. A service on Redis answers 409: its ledger is read from Redis. */
export function usageView(ledger: MemoryUsageLedger | undefined, url: string): [number, Record<string, unknown>] {
  if (!ledger) return [409, { error: 'the usage ledger is in Redis: tollgate usage export --group NAME reads it there' }];
  const p = new URL(url, 'http://admin').searchParams;
  const after = whole(p.get('after'), 'after', Number.MAX_SAFE_INTEGER, 0);
  const count = whole(p.get('count'), 'count', MAX_USAGE_READ, 1000);
  if (count < 1) throw new InvalidRequestError(`count must be a whole number from 1 to ${MAX_USAGE_READ}`);
  return [200, ledger.read(after, count)];
}

function whole(text: string | null, what: string, max: number, fallback: number): number {
  if (text === null) return fallback;
  const n = Number(text);
  if (text.trim() === '' || !Number.isSafeInteger(n) || n < 0 || n > max) throw new InvalidRequestError(`${what} must be a whole number from 0 to ${max}`);
  return n;
}
