import { describe, expect, it } from 'vitest';
import { hasRoom, retryAfterMs, slidingUsed, windowStartMs } from '../../src/counters/window.js';

describe('window arithmetic', () => {
  it('aligns windows to the epoch', () => {
    expect(windowStartMs(3_601_500, 3_600_000)).toBe(3_600_000);
    expect(windowStartMs(59_999, 60_000)).toBe(0);
  });

  it('weighs the previous window by its remaining overlap', () => {
    expect(slidingUsed(10, 2, 15_000, 60_000)).toBe(9.5);
    expect(slidingUsed(10, 0, 0, 60_000)).toBe(10);
    expect(slidingUsed(10, 3, 59_999, 60_000)).toBeCloseTo(3.0002, 4);
  });

  it('treats hits 0 as "would one more fit"', () => {
    expect(hasRoom(9, 0, 10)).toBe(true);
    expect(hasRoom(10, 0, 10)).toBe(false);
    expect(hasRoom(8, 3, 10)).toBe(false);
  });

  it('fixed window: retry when the window ends', () => {
    expect(retryAfterMs({ windowMs: 1000, limit: 10, hits: 1, sliding: false }, 0, 10, 1_000_250)).toBe(750);
  });

  it('a request larger than the limit is told to wait a whole window', () => {
    expect(retryAfterMs({ windowMs: 60_000, limit: 2, hits: 3, sliding: false }, 0, 0, 0)).toBe(60_000);
  });

  it('sliding window: waits until the previous window has decayed enough', () => {
    // prev 10, curr 2, limit 10 at 15 s: room for one more at 18 s.
    expect(retryAfterMs({ windowMs: 60_000, limit: 10, hits: 1, sliding: true }, 10, 2, 15_000)).toBe(3_000);
    // curr already fills the limit: wait for the next window and for curr to decay there.
    expect(retryAfterMs({ windowMs: 60_000, limit: 10, hits: 1, sliding: true }, 0, 10, 30_000)).toBe(30_000 + 6_000);
  });
});
