import type { DescriptorOutcome, WindowState } from '../limiter/limiter.js';

/** The window that decides a descriptor: an over-limit window with the longest wait, else the one with
 * the fewest requests left (the shorter window on a tie, as it recovers first). */
export function bindingWindow(windows: readonly WindowState[]): WindowState | undefined {
  let best: WindowState | undefined;
  for (const w of windows) {
    if (!best || isTighter(w, best)) best = w;
  }
  return best;
}

function isTighter(w: WindowState, than: WindowState): boolean {
  if (w.over !== than.over) return w.over;
  if (w.over) return w.retryAfterMs > than.retryAfterMs;
  if (w.remaining !== than.remaining) return w.remaining < than.remaining;
  return w.limit.windowSeconds < than.limit.windowSeconds;
}

/** The window the response headers report, over all descriptors that enforce (shadow ones are invisible to
 * clients). 'longest': the longest window (the property API's hourly limit), fewest remaining on a tie. */
export function reportedWindow(
  descriptors: readonly DescriptorOutcome[],
  mode: 'longest' | 'tightest',
): { window: WindowState; owner: DescriptorOutcome } | undefined {
  let best: { window: WindowState; owner: DescriptorOutcome } | undefined;
  for (const owner of descriptors) {
    if (owner.shadow) continue;
    for (const w of owner.windows) {
      if (!best || (mode === 'longest' ? isLonger(w, best.window) : isTighter(w, best.window))) best = { window: w, owner };
    }
  }
  return best;
}

function isLonger(w: WindowState, than: WindowState): boolean {
  if (w.limit.windowSeconds !== than.limit.windowSeconds) return w.limit.windowSeconds > than.limit.windowSeconds;
  return w.remaining < than.remaining;
}
