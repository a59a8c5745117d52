import { performance } from 'node:perf_hooks';
import type { Logger } from 'pino';
import { StoreKeyError } from '../errors.js';

/** How long an OOM refusal keeps health() degraded, and how often one kind of key refusal is logged. */
const OOM_REPORT_MS = 10_000;
const REFUSAL_LOG_MS = 60_000;

/** Requests whose keys Redis refused (the rest of their batch is decided): counted by the caller's metrics,
 * logged here once a minute per kind, so a poisoned key hit 500 times a second logs once a minute; and, for
 * OOM, reported for the next 10 s: every write is being refused, which /readyz and tollgate_store_degraded
 * must show although Redis still answers. */
export class KeyRefusals {
  /** When each kind of refusal was last logged. */
  private readonly logged = new Map<string, number>();
  /** Until when Redis is known to be out of memory (its writes refused). */
  private oomUntil = 0;

  constructor(private readonly logger: Logger) {}

  /** Whether Redis refused a write for lack of memory in the last OOM_REPORT_MS. */
  outOfMemory(): boolean {
    return performance.now() < this.oomUntil;
  }

  /** The error a refused request fails with; its kind is Redis's error prefix (OOM, WRONGTYPE, …). */
  readonly refused = (kind: string): StoreKeyError => {
    const now = performance.now();
    if (kind === 'OOM') this.oomUntil = now + OOM_REPORT_MS;
    if (now - (this.logged.get(kind) ?? -Infinity) >= REFUSAL_LOG_MS) {
      this.logged.set(kind, now);
      const why =
        kind === 'OOM'
          ? 'redis is out of memory (maxmemory reached): it refuses to count'
          : kind === 'WRONGTYPE'
            ? 'a counter key holds a value of another type (another program, or another key layout)'
            : 'redis refused a request';
      this.logger.error({ kind }, `${why}: those requests fail alone (failure policy), the rest of their batch is decided`);
    }
    return new StoreKeyError(kind);
  };
}
