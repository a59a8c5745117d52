import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/counters/clock.js';
import { SLOT_GIVE_BACK } from '../../src/limits/charge-rules.js';
import type { CounterCheck } from '../../src/limits/check.js';
import { SLOT_WEIGHT } from '../../src/limits/kinds/in-flight.js';
import { counterCheck, slotOp } from '../helpers/checks.js';
import { SLOTS } from '../helpers/kinds.js';
import { everyStore } from '../helpers/stores.js';

// What one in-flight call may make a store do is bounded, whatever it names: a give-back without an id returns
// at most SLOT_GIVE_BACK slots a descriptor (2^32 once ran one 631 ms script over 661,000 holders, and stopped
// the memory store's event loop 216 ms), and a script call carries at most 512 / SLOT_WEIGHT in-flight checks
// (a flood of 64-take calls ran scripts of 159 ms that other clients' calls waited behind).

const T0 = 1_800_000_000_000;
const MAX_UINT32 = 2 ** 32 - 1;
const slots = (key: string, hits: number): CounterCheck =>
  counterCheck({ key: `{${key}}:slots`, windowMs: 3_600_000, limit: 1_000_000, ...slotOp(hits), kind: SLOTS, charge: true, slots: { id: undefined } });

describe('in-flight work per call', () => {
  const { stores, redis } = everyStore();
  describe.each(stores)('%s', (name, make) => {
    it(`a give-back without an id of 2^32 - 1 returns ${SLOT_GIVE_BACK} slots a descriptor; the rest stay held`, async () => {
      const store = await make(new ManualClock(T0));
      // 8 counters of 300 holders, taken 100 a call.
      for (let k = 0; k < 8; k++) for (let i = 0; i < 3; i++) await store.check(Array.from({ length: 100 }, () => slots(`c${k}`, 1)));
      const back = await store.check(Array.from({ length: 8 }, (_, k) => slots(`c${k}`, -MAX_UINT32)));
      expect(back.counted).toEqual(Array.from({ length: 8 }, () => -SLOT_GIVE_BACK));
      // What a look finds held now: 300 - 100 on every counter.
      const look = await store.check(Array.from({ length: 8 }, (_, k) => slots(`c${k}`, 0)));
      expect(look.curr).toEqual(Array.from({ length: 8 }, () => 300 - SLOT_GIVE_BACK));
    });

    if (name === 'redis')
      it(`a turn of 64 in-flight takes goes in ${(64 * SLOT_WEIGHT) / 512} script calls, not one`, async () => {
        const store = await make(new ManualClock(T0));
        await store.check([slots('warm', 1)]);
        const calls = async () => {
          const stats = await redis().cli('INFO', 'commandstats');
          return [...stats.matchAll(/cmdstat_(?:evalsha|eval):calls=(\d+)/g)].reduce((s, m) => s + Number(m[1]), 0);
        };
        const before = await calls();
        const rs = await Promise.all(Array.from({ length: 64 }, (_, i) => store.check([slots(`t${i}`, 1)])));
        expect(rs.every((r) => r.admitted)).toBe(true);
        expect((await calls()) - before).toBe((64 * SLOT_WEIGHT) / 512);
      });
  });
});
