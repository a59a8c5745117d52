import { describe, expect, it } from 'vitest';
import { RESET_BURST, RESET_RATE } from '../../src/server/port-bounds.js';
import { ResetAllowance } from '../../src/server/reset-guard.js';

// A connection's allowance of rapid resets (src/server/reset-guard.ts): round 5's burst and rate, on a clock the
// test gives.

describe('ResetAllowance', () => {
  it(`takes a burst of ${RESET_BURST}, then ${RESET_RATE} a second, never more than the burst after a quiet spell`, () => {
    const a = new ResetAllowance(0);
    let taken = 0;
    while (a.take(0)) taken++;
    expect(taken).toBe(RESET_BURST);
    expect(a.take(1000 / RESET_RATE - 1)).toBe(false);
    expect(a.take(1000 / RESET_RATE + 1)).toBe(true);
    // An hour idle refills the burst, no more.
    const later = 3_600_000;
    let again = 0;
    while (a.take(later)) again++;
    expect(again).toBe(RESET_BURST);
  });
});
