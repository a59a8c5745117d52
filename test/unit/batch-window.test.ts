import { describe, expect, it } from 'vitest';
import { SettingsError } from '../../src/settings/compat.js';
import { parseServeArgs } from '../../src/settings/settings.js';

// REDIS_PIPELINE_WINDOW / --redis-pipeline-window and REDIS_PIPELINE_LIMIT, read as envoyproxy/ratelimit writes
// them (Go durations), into whole milliseconds.

const batch = (env: NodeJS.ProcessEnv, args: string[] = []) => parseServeArgs(args, env).redisBatch;

describe('the Redis batch window settings', () => {
  it('unset: each event-loop turn, no limit', () => {
    expect(batch({})).toEqual({ windowMs: 0, limit: 0 });
  });

  it("Go durations in whole milliseconds; under one (radix's 150us) is each turn", () => {
    expect(batch({ REDIS_PIPELINE_WINDOW: '150us' })).toEqual({ windowMs: 0, limit: 0 });
    expect(batch({ REDIS_PIPELINE_WINDOW: '2ms', REDIS_PIPELINE_LIMIT: '64' })).toEqual({ windowMs: 2, limit: 64 });
    expect(batch({ REDIS_PIPELINE_WINDOW: '1400us' })).toEqual({ windowMs: 1, limit: 0 });
    expect(batch({ REDIS_PIPELINE_WINDOW: '0' })).toEqual({ windowMs: 0, limit: 0 });
    expect(batch({ REDIS_PIPELINE_WINDOW: '1ms' }, ['--redis-pipeline-window', '5ms']).windowMs).toBe(5);
  });

  it('past 10 ms, not a duration, or a limit that is not a whole number: a clear error naming the setting', () => {
    expect(() => batch({ REDIS_PIPELINE_WINDOW: '1s' })).toThrow(SettingsError);
    expect(() => batch({ REDIS_PIPELINE_WINDOW: '11ms' })).toThrow(/REDIS_PIPELINE_WINDOW must be at most 10ms \(got "11ms"\)/);
    expect(() => batch({ REDIS_PIPELINE_WINDOW: 'soon' })).toThrow(/REDIS_PIPELINE_WINDOW must be a duration/);
    expect(() => batch({ REDIS_PIPELINE_LIMIT: '-1' })).toThrow(/REDIS_PIPELINE_LIMIT must be a whole number/);
    expect(() => batch({ REDIS_PIPELINE_WINDOW: '2ms', REDIS_PIPELINE_LIMIT: '513' })).toThrow(/REDIS_PIPELINE_LIMIT must be at most 512/);
    // The time a call is held comes off its Redis deadline: what is left must be at least as long as the window
    // (round 5: a 10 ms window under an 11 ms timeout failed 10 % of a healthy Redis's calls).
    expect(() => batch({ REDIS_PIPELINE_WINDOW: '5ms', REDIS_TIMEOUT_MS: '5' })).toThrow(/must be at most half the Redis timeout \(5 ms/);
    expect(() => batch({ REDIS_PIPELINE_WINDOW: '10ms', REDIS_TIMEOUT_MS: '11' })).toThrow(/at most half the Redis timeout \(11 ms/);
    expect(batch({ REDIS_PIPELINE_WINDOW: '5ms', REDIS_TIMEOUT_MS: '10' }).windowMs).toBe(5);
  });

  it('the bound applies to the rounded window; a limit without a window is none', () => {
    expect(batch({ REDIS_PIPELINE_WINDOW: '10.4ms' }).windowMs).toBe(10);
    // ratelimit's usual 150us with a limit: here no window, so no limit either (it would only cut each turn's call)
    expect(batch({ REDIS_PIPELINE_WINDOW: '150us', REDIS_PIPELINE_LIMIT: '8' })).toEqual({ windowMs: 0, limit: 0 });
  });
});
