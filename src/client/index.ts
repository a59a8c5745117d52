/**
 * tollgate/client: a fetch wrapper for consumers of a rate-limited API (the property API's own advice:
 * back off 1 s, 2 s, 4 s, 8 s, 16 s). No dependencies beyond the platform's fetch.
 *
 *   const api = createClient({ maxRetries: 5, pacer: new Pacer({ perSecond: 9 }) });
 *   const res = await api.fetch('http://localhost:10000/invoices', { headers: { authorization: 'Bearer …' } });
 *   api.rateLimit; // { limit: 1000, remaining: 987, resetAt: 1795255200, … } from the last response
 */

/** The last X-RateLimit-* values seen, so callers can pace themselves. */
export interface RateLimitState {
  /** X-RateLimit-Limit */
  limit?: number;
  /** X-RateLimit-Remaining */
  remaining?: number;
  /** X-RateLimit-Reset: Unix time in seconds when the window resets. */
  resetAt?: number;
  /** Retry-After of the last 429, in milliseconds. */
  retryAfterMs?: number;
  /** Status of the response these came from. */
  status: number;
}

export interface ClientOptions {
  /** Retries after a 429 (so at most maxRetries + 1 attempts). Default 5: waits of 1, 2, 4, 8, 16 s. */
  maxRetries?: number;
  /** First backoff wait when the 429 has no Retry-After; doubles each retry. Default 1000 ms. */
  baseDelayMs?: number;
  /** Random extra wait, as a share of each backoff wait, so clients do not retry in step. Default 0.2. */
  jitter?: number;
  /** Longest Retry-After worth waiting for; a longer one returns the 429 at once. Default 60 s. */
  maxRetryAfterMs?: number;
  /** Methods retried after a 429. Default: the idempotent ones (GET, HEAD, OPTIONS, PUT, DELETE). */
  retryMethods?: readonly string[];
  /** Also retry POST and PATCH (only if the server treats repeats safely). Default false. */
  retryNonIdempotent?: boolean;
  /** Spaces requests to stay under a rate; see Pacer. */
  pacer?: Pacer;
  /** Called before each wait. */
  onRetry?: (e: { attempt: number; delayMs: number; response: Response }) => void;
  /** For tests: the fetch, timer and randomness to use. */
  fetch?: typeof fetch;
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  random?: () => number;
}

const defaults = {
  maxRetries: 5,
  baseDelayMs: 1000,
  jitter: 0.2,
  maxRetryAfterMs: 60_000,
  retryMethods: ['GET', 'HEAD', 'OPTIONS', 'PUT', 'DELETE'] as readonly string[],
};

/** Waits `ms`, or rejects with the signal's reason as soon as it aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** Retry-After as milliseconds: delta-seconds or an HTTP date (RFC 9110). Undefined when absent or unreadable. */
export function parseRetryAfter(value: string | null, nowMs = Date.now()): number | undefined {
  if (value === null || value.trim() === '') return undefined;
  if (/^\d+$/.test(value.trim())) return Number(value.trim()) * 1000;
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, at - nowMs);
}

export function readRateLimit(res: Response, nowMs = Date.now()): RateLimitState {
  const num = (name: string): number | undefined => {
    const v = res.headers.get(name);
    return v !== null && /^\d+$/.test(v.trim()) ? Number(v) : undefined;
  };
  return {
    status: res.status,
    limit: num('x-ratelimit-limit'),
    remaining: num('x-ratelimit-remaining'),
    resetAt: num('x-ratelimit-reset'),
    retryAfterMs: res.status === 429 ? parseRetryAfter(res.headers.get('retry-after'), nowMs) : undefined,
  };
}

/** Spaces requests evenly so a client stays under `perSecond` (e.g. 9 for a 10/s limit), letting `burst`
 * requests go at once after a quiet spell. Shared by every request made through one client. */
export class Pacer {
  private nextAt = 0;
  private readonly intervalMs: number;
  private readonly burst: number;

  constructor(private readonly opts: { perSecond: number; burst?: number; now?: () => number; sleep?: (ms: number, signal?: AbortSignal) => Promise<void> }) {
    if (!(opts.perSecond > 0)) throw new RangeError('Pacer: perSecond must be above 0');
    this.intervalMs = 1000 / opts.perSecond;
    this.burst = Math.max(1, opts.burst ?? 1);
  }

  /** Resolves when the next request may go. */
  async take(signal?: AbortSignal): Promise<void> {
    const now = (this.opts.now ?? Date.now)();
    // Unused slots are kept up to `burst`, so a quiet client may send a few at once.
    const start = Math.max(this.nextAt, now - (this.burst - 1) * this.intervalMs);
    this.nextAt = start + this.intervalMs;
    const wait = start - now;
    if (wait > 0) await (this.opts.sleep ?? sleep)(wait, signal);
  }
}

export interface RateLimitedClient {
  fetch(input: string | URL | Request, init?: RequestInit): Promise<Response>;
  /** The X-RateLimit-* values of the last response, if it had any. */
  readonly rateLimit: RateLimitState | undefined;
}

/** A client whose fetch waits out 429s as the server asks (Retry-After), or with exponential backoff and
 * jitter when it does not, up to `maxRetries`. The last 429 is returned when retries run out or the method
 * may not be repeated; every other response is returned as is. */
export function createClient(options: ClientOptions = {}): RateLimitedClient {
  const o = { ...defaults, ...options };
  const doFetch = options.fetch ?? fetch;
  const wait = options.sleep ?? sleep;
  const random = options.random ?? Math.random;
  let last: RateLimitState | undefined;

  const retryable = (method: string): boolean =>
    o.retryMethods.includes(method) || ((o.retryNonIdempotent ?? false) && (method === 'POST' || method === 'PATCH'));

  const client: RateLimitedClient = {
    get rateLimit() {
      return last;
    },
    async fetch(input, init = {}) {
      const request = new Request(input, init);
      const method = request.method.toUpperCase();
      const signal = init.signal ?? request.signal;
      // A body is read once: buffer it so a retry can send it again.
      const body = request.body ? await request.arrayBuffer() : undefined;
      for (let attempt = 0; ; attempt++) {
        if (o.pacer) await o.pacer.take(signal);
        const res = await doFetch(new Request(request, { body, signal }));
        const state = readRateLimit(res);
        if (state.limit !== undefined || state.remaining !== undefined || res.status === 429) last = state;
        if (res.status !== 429 || attempt >= o.maxRetries || !retryable(method)) return res;
        const delayMs = state.retryAfterMs ?? o.baseDelayMs * 2 ** attempt * (1 + o.jitter * random());
        if (delayMs > o.maxRetryAfterMs) return res;
        o.onRetry?.({ attempt: attempt + 1, delayMs, response: res });
        await res.body?.cancel();
        await wait(delayMs, signal);
      }
    },
  };
  return client;
}
