import type { Logger } from 'pino';
import { StoreUnavailableError } from '../errors.js';
import { systemClock, type Clock } from '../limiter/clock.js';
import type { CheckResult, CounterCheck, CounterWindow, Store, StoreHealth } from './store.js';

/** What a decision does when the shared store cannot answer:
 *  allow  answer gRPC UNAVAILABLE at once, so Envoy's failure_mode_deny decides (false, Envoy's default: the
 *         request passes) — the behaviour envoyproxy/ratelimit users know;
 *  deny   answer OVER_LIMIT with Retry-After: 1;
 *  local  keep enforcing the limits with this replica's own in-memory counters until the store is back. */
export type FailurePolicy = 'allow' | 'deny' | 'local';
export const FAILURE_POLICIES: readonly FailurePolicy[] = ['allow', 'deny', 'local'];

export class PolicyStore implements Store {
  readonly kind: string;
  /** True while decisions are made with the local fallback counters. */
  inFallback = false;

  constructor(
    private readonly inner: Store,
    readonly policy: FailurePolicy,
    private readonly logger: Pick<Logger, 'warn' | 'info'>,
    private readonly fallback?: Store,
    private readonly clock: Clock = systemClock,
  ) {
    this.kind = inner.kind;
    if (policy === 'local' && !fallback) throw new Error('the local failure policy needs a fallback store');
  }

  async check(checks: readonly CounterCheck[]): Promise<CheckResult> {
    try {
      const result = await this.inner.check(checks);
      if (this.inFallback) {
        this.inFallback = false;
        this.logger.info('shared store answering again: local fallback counters no longer used');
      }
      return result;
    } catch (err) {
      if (!(err instanceof StoreUnavailableError) || this.policy === 'allow') throw err;
      if (this.policy === 'deny') return this.denied(checks);
      if (!this.inFallback) {
        this.inFallback = true;
        this.logger.warn({ reason: err.message }, 'shared store unavailable: enforcing limits with local counters');
      }
      return { ...(await this.fallback!.check(checks)), source: 'fallback' };
    }
  }

  health(): StoreHealth {
    return this.inner.health();
  }

  async reset(windows: readonly CounterWindow[]): Promise<number> {
    const local = (await this.fallback?.reset(windows)) ?? 0;
    return local + (await this.inner.reset(windows));
  }

  /** Whether this replica can still decide usefully: everything but a degraded store under `deny`. */
  absorbs(): boolean {
    return this.policy !== 'deny';
  }

  async close(): Promise<void> {
    await this.inner.close();
    await this.fallback?.close();
  }

  private denied(checks: readonly CounterCheck[]): CheckResult {
    return {
      nowMs: this.clock.now(),
      admitted: false,
      curr: checks.map((c) => c.limit),
      prev: checks.map(() => 0),
      over: checks.map(() => true),
      retryAfterMs: 1000,
      source: 'policy',
    };
  }
}
