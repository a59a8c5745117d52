import { describe, expect, it } from 'vitest';
import { TimeoutError, withTimeout } from '../../src/store/timeout.js';

const never = new Promise<never>(() => undefined);

function busy(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until);
}

describe('withTimeout', () => {
  it('fails a call that never answers while the process is idle', async () => {
    await expect(withTimeout(never, 10, 50)).rejects.toBeInstanceOf(TimeoutError);
  });

  it('does not count time the process could not run against the call', async () => {
    const answer = withTimeout(
      new Promise<string>((resolve) => {
        // The process is blocked past the timeout; the answer comes 5 ms after it can run again.
        setImmediate(() => {
          busy(30);
          setTimeout(() => resolve('answered'), 5);
        });
      }),
      20,
      40,
    );
    await expect(answer).resolves.toBe('answered');
  });

  it('extends no further than the grace', async () => {
    const call = withTimeout(new Promise<never>(() => setImmediate(() => busy(100))), 10, 20);
    await expect(call).rejects.toBeInstanceOf(TimeoutError);
  });
});
