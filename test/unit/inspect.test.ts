import { describe, expect, it } from 'vitest';
import { inspectToken, tokenWindows } from '../../src/control/inspect.js';
import { fingerprint } from '../../src/fingerprint.js';
import { noTiers } from '../../src/limiter/plan.js';
import { compileYaml, harness, T0 } from '../helpers/decide.js';

// The admin API's view of a client's counters, over the real memory store on a manual clock.

const CONFIG = compileYaml(`
domain: api
descriptors:
  - key: token
    rate_limits:
      - {unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 20, name: per-second}
      - {unit: hour, requests_per_unit: 1000, name: per-hour}
`);

describe('inspect and reset a token bucket', () => {
  it('shows tokens taken and left, when it is full, and its burst; a reset refills it', async () => {
    const h = harness(CONFIG);
    for (let i = 0; i < 5; i++) await h.decide('api', [{ token: 'Bearer t' }]);
    const fp = fingerprint('Bearer t');
    const view = await inspectToken(CONFIG, noTiers, h.store, fp);
    expect(view.map(({ window, limit, used, remaining, resetAt, burst }) => ({ window, limit, used, remaining, resetAt, burst }))).toEqual([
      { window: 'second', limit: 10, used: 5, remaining: 15, resetAt: Math.ceil((T0 + 500) / 1000), burst: 20 },
      { window: 'hour', limit: 1000, used: 5, remaining: 995, resetAt: (T0 + 3_600_000) / 1000, burst: undefined },
    ]);
    expect(await h.store.reset(tokenWindows(CONFIG, noTiers, fp))).toBe(2);
    expect((await inspectToken(CONFIG, noTiers, h.store, fp)).map((c) => c.remaining)).toEqual([20, 1000]);
  });
});
