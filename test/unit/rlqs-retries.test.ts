import { expect, it } from 'vitest';
import { loadConfigDir } from '../../src/config/load.js';
import { noTiers } from '../../src/limiter/plan.js';
import { QuotaService } from '../../src/rlqs/quota/quota-service.js';
import { LocalShareEvents } from '../../src/rlqs/shares/share-events.js';
import { MemoryShareStore } from '../../src/rlqs/shares/share-store.js';
import { MemoryStore } from '../../src/store/memory-store.js';
import { within } from '../helpers/time.js';

// A bucket held below its fair share is re-assigned on its replica a few times an interval (quota-service.ts
// retry). The keys so counted are bounded; a key counted an interval ago must make room for one held back now,
// or once the bound has been reached in a process's life no bucket is ever retried again.

const INTERVAL_MS = 200;

it('forgets the retries of keys held back an interval ago, so a key held back now is retried past the bound', async () => {
  const config = loadConfigDir('test/fixtures/rlqs');
  const quota = new QuotaService({
    config: () => config,
    tiers: noTiers,
    store: new MemoryStore(),
    shares: new MemoryShareStore(),
    events: new LocalShareEvents(),
    settings: { reportIntervalMs: INTERVAL_MS, unmatched: 'allow', globalShadow: false },
    maxRetrying: 1,
  });
  /** The first instance takes the tenant's whole 100/s and keeps running it; the second is then held back, told
   * to the replicas once, and re-assigned (as its stream would, pushed) each time its bucket is: the calls past
   * the first are this replica's retries. */
  const holdBack = async (tenant: string): Promise<{ calls: () => number; stop: () => void }> => {
    const plan = quota.plan('rlqs-test', { tenant });
    const second = { plan, allowed: 0, demand: Infinity, running: 0 };
    let calls = 0;
    const stop = quota.watch(plan.shareKey, () => {
      calls++;
      void quota.assign('second', [second], true);
    });
    await quota.assign('first', [{ plan, allowed: 0, demand: Infinity, running: 100 }]);
    await quota.assign('second', [second]);
    return { calls: () => calls, stop };
  };
  const a = await holdBack('a');
  await within(2000, () => a.calls() >= 2, 'the first key retried');
  a.stop(); // its stream is gone: nothing holds it back any more
  await new Promise((r) => setTimeout(r, INTERVAL_MS + 20)); // its retries are an interval old
  expect(a.calls()).toBeLessThanOrEqual(5); // one telling and RETRIES_PER_INTERVAL at most
  const b = await holdBack('b');
  await within(2000, () => b.calls() >= 2, 'a key held back an interval later retried, past the bound of one');
  quota.close();
});
