import { defineConfig } from 'vitest/config';

/** `npm run bench:rlqs`: RLQS accuracy against simulated Envoys (bench/rlqs-accuracy.bench-test.ts). Not part
 * of `npm test`: it measures, over about a minute, rather than asserting behaviour. */
export default defineConfig({
  test: { include: ['bench/rlqs-accuracy.bench-test.ts'], testTimeout: 300_000, hookTimeout: 30_000 },
});
