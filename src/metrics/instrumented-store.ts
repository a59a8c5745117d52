import { performance } from 'node:perf_hooks';
import { StoreConnectionError, StoreDegradedError, StoreKeyError, StoreMovingError } from '../errors.js';
import type { CheckResult, CounterCheck, CounterWindow } from '../limits/check.js';
import type { Maybe, Store, StoreHealth, TraceLink } from '../store/store.js';
import { TimeoutError } from '../store/timeout.js';
import type { Metrics } from './metrics.js';

/** Times every store call and counts failures by kind. Wraps the real store, under the cache and the
 * failure policy, so it sees actual round trips. */
export class InstrumentedStore implements Store {
  readonly kind: string;
  private readonly latency;
  constructor(
    private readonly inner: Store,
    private readonly metrics: Metrics,
  ) {
    this.kind = inner.kind;
    this.latency = metrics.storeLatency.labels({ store: inner.kind });
  }

  check(checks: readonly CounterCheck[], trace?: TraceLink): Maybe<CheckResult> {
    const start = performance.now();
    let result: Maybe<CheckResult>;
    try {
      result = this.inner.check(checks, trace);
    } catch (err) {
      throw this.failed(err);
    }
    if (!(result instanceof Promise)) {
      this.latency.observe((performance.now() - start) / 1000);
      return result;
    }
    return result.then(
      (r) => {
        this.latency.observe((performance.now() - start) / 1000);
        return r;
      },
      (err: unknown) => {
        throw this.failed(err);
      },
    );
  }

  private failed(err: unknown): unknown {
    this.metrics.storeErrors.inc({ store: this.kind, kind: errorKind(err) });
    return err;
  }

  health(): StoreHealth {
    return this.inner.health();
  }

  reset(windows: readonly CounterWindow[]): Promise<number> {
    return this.inner.reset(windows);
  }

  close(): Promise<void> {
    return this.inner.close();
  }
}

/** The kind of a failure, from the error's class (the store wraps what its client raised in `cause`). */
function errorKind(err: unknown): 'timeout' | 'connection' | 'degraded' | 'cluster_moving' | 'wrong_type' | 'out_of_memory' | 'other' {
  if (err instanceof StoreDegradedError) return 'degraded';
  if (err instanceof StoreMovingError) return 'cluster_moving';
  if (err instanceof StoreKeyError) return err.kind === 'WRONGTYPE' ? 'wrong_type' : err.kind === 'OOM' ? 'out_of_memory' : 'other';
  if (err instanceof StoreConnectionError) return 'connection';
  if (err instanceof TimeoutError || (err instanceof Error && err.cause instanceof TimeoutError)) return 'timeout';
  return 'other';
}
