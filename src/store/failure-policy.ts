import type { Logger } from 'pino';
import { type Clock, systemClock } from '../counters/clock.js';
import { StoreKeyError, StoreUnavailableError } from '../errors.js';
import { SettlementQueue } from './settlement-queue.js';
import type { CheckResult, CounterCheck, CounterWindow, Maybe, Store, StoreHealth, TraceLink } from './store.js';

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
  /** Stream-end settlements the store could not take, sent again when it answers (under every policy). */
  readonly settlements: SettlementQueue;

  constructor(
    private readonly inner: Store,
    readonly policy: FailurePolicy,
    private readonly logger: Pick<Logger, 'warn' | 'info'>,
    private readonly fallback?: Store,
    private readonly clock: Clock = systemClock,
  ) {
    this.kind = inner.kind;
    if (policy === 'local' && !fallback) throw new Error('the local failure policy needs a fallback store');
    this.settlements = new SettlementQueue(inner);
  }

  check(checks: readonly CounterCheck[], trace?: TraceLink): Maybe<CheckResult> {
    let result: Maybe<CheckResult>;
    try {
      result = this.inner.check(checks, trace);
    } catch (err) {
      return this.failed(checks, err);
    }
    if (result instanceof Promise)
      return result.then(
        (r) => this.answered(r),
        (err: unknown) => this.failed(checks, err),
      );
    return this.answered(result);
  }

  private answered(result: CheckResult): CheckResult {
    if (this.inFallback) {
      this.inFallback = false;
      this.logger.info('shared store answering again: local fallback counters no longer used');
    }
    return result;
  }

  /** The policy's answer when the store could not give one; rethrows what the policy does not cover. */
  private failed(checks: readonly CounterCheck[], err: unknown): Maybe<CheckResult> {
    const away = err instanceof StoreUnavailableError && !(err instanceof StoreKeyError);
    if (away && SettlementQueue.holds(checks)) this.settlements.keep(checks);
    if (!(err instanceof StoreUnavailableError) || this.policy === 'allow') throw err;
    if (this.policy === 'deny') return this.denied(checks);
    // One request refused for its own keys says nothing of the store (the store logs it, rate-limited): no
    // switch into fallback mode and back for every such request.
    if (!this.inFallback && !(err instanceof StoreKeyError)) {
      this.inFallback = true;
      this.logger.warn({ reason: err.message }, 'shared store unavailable: enforcing limits with local counters');
    }
    const local = this.fallback!.check(checks);
    if (local instanceof Promise) return local.then((r) => ({ ...r, source: 'fallback' as const }));
    return { ...local, source: 'fallback' };
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
    this.settlements.close();
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
