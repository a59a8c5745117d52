import { describe, expect, it } from 'vitest';
import { StoreConnectionError, StoreDegradedError, StoreUnavailableError } from '../../src/errors.js';
import { InstrumentedStore } from '../../src/metrics/instrumented-store.js';
import { Metrics } from '../../src/metrics/metrics.js';
import type { Store } from '../../src/store/store.js';
import { TimeoutError } from '../../src/store/timeout.js';

/** A store whose every call fails with `err`. */
function failing(err: unknown): Store {
  return {
    kind: 'redis',
    check: () => Promise.reject(err),
    health: () => ({ degraded: false, reason: undefined }),
    reset: () => Promise.resolve(0),
    close: () => Promise.resolve(),
  };
}

async function kindOf(err: unknown): Promise<string> {
  const metrics = new Metrics({ nearLimitRatio: 0.8 });
  await expect(new InstrumentedStore(failing(err), metrics).check([])).rejects.toBe(err);
  const counted = (await metrics.storeErrors.get()).values.filter((v) => v.value > 0);
  expect(counted).toHaveLength(1);
  return String(counted[0]!.labels.kind);
}

describe('store failures are counted by the class of the error, never by its text', () => {
  it('a call that ran out of time: timeout', async () => {
    expect(await kindOf(new StoreUnavailableError('redis: anything at all', { cause: new TimeoutError(25, 0) }))).toBe('timeout');
    expect(await kindOf(new TimeoutError(25, 0))).toBe('timeout');
  });

  it('no usable connection: connection', async () => {
    expect(await kindOf(new StoreConnectionError('redis: Connection is closed.', { cause: new Error('Connection is closed.') }))).toBe('connection');
  });

  it('a store known to be down, refusing without trying: degraded', async () => {
    expect(await kindOf(new StoreDegradedError('redis unavailable: connection closed'))).toBe('degraded');
  });

  it('anything else, whatever its words: other', async () => {
    expect(await kindOf(new StoreUnavailableError('redis: ERR timed out connect closed unavailable:'))).toBe('other');
    expect(await kindOf(new Error('Command timed out ECONNREFUSED'))).toBe('other');
  });
});
