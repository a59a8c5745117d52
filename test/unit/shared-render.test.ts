import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { SharedRender } from '../../src/http/shared-render.js';

describe('metrics rendered at most once an interval, never staler than the scrape', () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it('1,000 scrapes at once share one render; one that comes while it runs waits for the next, an interval on', async () => {
    let renders = 0;
    let state = 'a';
    const shared = new SharedRender(
      async () => `${state}:${++renders}`,
      100,
      () => Date.now(),
    );
    const flood = Array.from({ length: 1000 }, () => shared.text());
    await vi.advanceTimersByTimeAsync(0);
    expect(new Set(await Promise.all(flood))).toEqual(new Set(['a:1']));
    expect(renders).toBe(1);
    // What changed after the render started is in the next scrape's answer, which waits out the interval.
    state = 'b';
    const later = shared.text();
    await vi.advanceTimersByTimeAsync(50);
    expect(renders).toBe(1);
    await vi.advanceTimersByTimeAsync(50);
    expect(await later).toBe('b:2');
    // A scrape past the interval is rendered at once.
    await vi.advanceTimersByTimeAsync(500);
    const alone = shared.text();
    await vi.advanceTimersByTimeAsync(0);
    expect(await alone).toBe('b:3');
  });

  it('a render that fails fails the scrapes that shared it, and the next scrape renders again', async () => {
    let fail = true;
    const shared = new SharedRender(
      async () => {
        if (fail) throw new Error('workers did not answer');
        return 'ok';
      },
      100,
      () => Date.now(),
    );
    const first = shared.text();
    const check = expect(first).rejects.toThrow(/workers/);
    await vi.advanceTimersByTimeAsync(0);
    await check;
    fail = false;
    const second = shared.text();
    await vi.advanceTimersByTimeAsync(100);
    expect(await second).toBe('ok');
  });
});
