import { CliError } from '../errors.js';
import { asFingerprint, fingerprint } from '../fingerprint.js';
import type { UsageEvent } from '../store/usage-ledger.js';
import type { CounterView } from './inspect.js';
import type { TierAssignment } from './tier-store.js';

/** One window of GET /v1/spend's answer. */
export interface SpendWindowView {
  domain: string;
  rule: string;
  window: string;
  names: string[];
  limit: number;
  listed: number;
  offset: number;
  counters: { counter: string; share: number }[];
  next: number | null;
}

/** The CLI's side of the admin API: same routes, same credential (TOLLGATE_ADMIN_TOKEN). */
export class AdminClient {
  constructor(
    private readonly baseUrl: string,
    private readonly token: string,
  ) {}

  /** The assignment, and the rules whose limits the tier changes (domain/rule; an older service leaves it out). */
  assign(fp: string, tier: string): Promise<TierAssignment & { rules?: string[] }> {
    return this.call('PUT', `/admin/tiers/${fp}`, { tier });
  }

  remove(fp: string): Promise<{ fingerprint: string }> {
    return this.call('DELETE', `/admin/tiers/${fp}`);
  }

  list(): Promise<{ assignments: TierAssignment[] }> {
    return this.call('GET', '/admin/tiers');
  }

  inspect(fp: string): Promise<{ fingerprint: string; tier: string | null; counters: CounterView[] }> {
    return this.call('GET', `/admin/tokens/${fp}`);
  }

  resetCounters(fp: string): Promise<{ reset: number; existed: number }> {
    return this.call('DELETE', `/admin/tokens/${fp}/counters`);
  }

  /** GET /v1/spend: the counters nearest their limit of a charge_mode rule's windows (control/spend-view.ts). */
  spend(q: { rule: string; domain?: string; top?: string; offset?: string }): Promise<{ windows: SpendWindowView[]; more: boolean }> {
    const params = new URLSearchParams({ rule: q.rule });
    if (q.domain !== undefined) params.set('domain', q.domain);
    if (q.top !== undefined) params.set('top', q.top);
    if (q.offset !== undefined) params.set('offset', q.offset);
    return this.call('GET', `/v1/spend?${params}`);
  }

  /** GET /v1/usage: the memory store's ledger events after `after` (control/admin-api.ts). */
  usage(after: number, count: number): Promise<{ stream: string; events: UsageEvent[]; first: number; last: number }> {
    return this.call('GET', `/v1/usage?after=${after}&count=${count}`);
  }

  private async call<T>(method: string, path: string, body?: unknown): Promise<T> {
    let res: Response;
    try {
      res = await fetch(new URL(path, this.baseUrl), {
        method,
        headers: { authorization: `Bearer ${this.token}`, 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(10_000),
      });
    } catch (err) {
      throw unreachable(this.baseUrl, err);
    }
    const data = (await res.json().catch(() => ({}))) as { error?: string };
    if (!res.ok) throw new Error(`${res.status}: ${data.error ?? res.statusText}`);
    return data as T;
  }
}

/** fetch() says only "fetch failed"; the cause (ECONNREFUSED, a timeout) and where the admin API listens are
 * what the user needs: it is on loopback, so from outside the pod it takes a port-forward. */
function unreachable(baseUrl: string, err: unknown): CliError {
  const e = err as Error & { cause?: { code?: string; message?: string } };
  const why = e.name === 'TimeoutError' ? 'no answer within 10 s' : (e.cause?.code ?? e.cause?.message ?? e.message);
  return new CliError(
    `cannot reach the admin API at ${baseUrl} (${why}): it listens only where TOLLGATE_ADMIN_TOKEN is set, on the pod's loopback ` +
      '(--admin-host, --admin-port); from outside the pod: kubectl port-forward <pod> 8082 (docs/kubernetes.md#run-time-tiers)',
  );
}

/** The fingerprint the admin API is asked about: of a token (a tenant id, any text), or a fingerprint as
 * given with `as: 'fingerprint'` (32 or 64 hex characters). Hex text of 31 to 64 characters without either
 * flag is refused before any call: a tenant id of 32 hex characters and a fingerprint look the same, and
 * guessing wrong acts on a client that does not exist, successfully; other lengths are almost surely a
 * fingerprint damaged in copying. */
export function toFingerprint(text: string, as?: 'token' | 'fingerprint'): string {
  if (as === 'token') return fingerprint(text);
  const fp = asFingerprint(text);
  if (as === 'fingerprint') {
    if (fp) return fp;
    throw new CliError(`--fingerprint takes 32 or 64 hex characters (got ${text.length} characters): check what was copied`, 2);
  }
  if (fp) {
    throw new CliError(
      `a ${text.length}-character hex string may be a token or a fingerprint: pass --token if it is a token or tenant id, --fingerprint if it is a fingerprint`,
      2,
    );
  }
  if (/^[0-9a-f]{31,63}$/i.test(text)) {
    throw new CliError(
      `a ${text.length}-character hex string is not a fingerprint (32 or 64 characters): check what was copied, or pass --token if it is a token`,
      2,
    );
  }
  return fingerprint(text);
}
