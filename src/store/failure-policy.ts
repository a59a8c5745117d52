import type { Logger } from 'pino';
import { type Clock, systemClock } from '../counters/clock.js';
import { StoreDegradedError, StoreKeyError, StoreMovingError, StoreUnavailableError } from '../errors.js';
import type { CheckResult, CounterCheck, CounterWindow } from '../limits/check.js';
import { SettlementQueue } from './settlement-queue.js';
import type { Maybe, Store, StoreHealth, TraceLink } from './store.js';

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
    else if (away && mayHaveRun(err)) this.keepGiveBack(checks);
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

  /** A take of slots by request id whose answer never came (a timeout, a connection lost with the call on it)
   * may have run: its give-back is kept and sent once the store answers, so a slot the caller never learnt of
   * is not held for its lease. Giving back an id that holds nothing returns nothing. A take that ran later
   * still (after the give-back) is held until Envoy's own give-back or its lease. */
  private keepGiveBack(checks: readonly CounterCheck[]): void {
    const back = SettlementQueue.giveBackOf(checks);
    if (back) this.settlements.keep(back);
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

/** Whether a failed call may have run in the store: not when it was refused without being sent (degraded), nor
 * when a Cluster refused it before it wrote anything (moving). */
function mayHaveRun(err: unknown): boolean {
  return !(err instanceof StoreDegradedError) && !(err instanceof StoreMovingError);
}
