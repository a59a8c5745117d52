// The memory store's footprint: N distinct tokens, each making one read through the real limiter with the
// bundled config, spread over virtual time at 10,000 new tokens a second (so per-second counters come and
// go, and every token keeps its hourly counter). Run with --expose-gc. Prints one JSON line.
import { loadConfigDir } from '../dist/config/load.js';
import { ManualClock } from '../dist/counters/clock.js';
import { Limiter } from '../dist/limiter/limiter.js';
import { MemoryStore } from '../dist/store/memory-store.js';

const tokens = Number(process.argv[2] ?? 1_000_000);
const config = loadConfigDir('config');
const clock = new ManualClock(1_800_000_000_000);
const store = new MemoryStore({ clock, maxCounters: Number(process.argv[3] ?? 1_000_000) });
const limiter = new Limiter({ config: () => config, store, clock });

const settle = () => {
  global.gc();
  global.gc();
  return process.memoryUsage();
};
const before = settle();
for (let i = 0; i < tokens; i++) {
  if (i % 10_000 === 0) clock.advance(1000);
  await limiter.decide({
    domain: 'property-api',
    hits: 1,
    descriptors: [
      {
        entries: [
          { key: 'category', value: 'read' },
          { key: 'token', value: `Bearer token-${i}` },
        ],
      },
    ],
  });
}
const after = settle();
const heap = after.heapUsed - before.heapUsed;
console.log(
  JSON.stringify({
    tokens,
    counters: store.size,
    evictions: store.evictions,
    heapMiB: heap / 2 ** 20,
    bytesPerCounter: heap / store.size,
    rssMiB: after.rss / 2 ** 20,
  }),
);
