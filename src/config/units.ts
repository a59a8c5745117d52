/** Window units. Month and year are fixed lengths (30 and 365 days), like envoyproxy/ratelimit; every window
 * is aligned to the Unix epoch, so all replicas agree on where a window starts. */
export const UNITS = {
  second: { seconds: 1, code: 1 },
  minute: { seconds: 60, code: 2 },
  hour: { seconds: 3600, code: 3 },
  day: { seconds: 86_400, code: 4 },
  month: { seconds: 30 * 86_400, code: 5 },
  year: { seconds: 365 * 86_400, code: 6 },
  week: { seconds: 7 * 86_400, code: 7 },
} as const;

export type Unit = keyof typeof UNITS;

export const UNIT_NAMES = Object.keys(UNITS) as Unit[];

export function parseUnit(text: string): Unit | undefined {
  const lower = text.toLowerCase();
  return lower in UNITS ? (lower as Unit) : undefined;
}

/** envoy.type.v3.RateLimitUnit (the descriptor override) has no WEEK: 1..6 map to the same names. */
const OVERRIDE_UNITS: readonly (Unit | undefined)[] = [undefined, 'second', 'minute', 'hour', 'day', 'month', 'year'];

export function unitFromOverrideCode(code: number): Unit | undefined {
  return OVERRIDE_UNITS[code];
}

/** The RateLimitUnit number of a unit name in any case ("SECOND", "hour"): 0 (UNKNOWN) or -1 (WEEK) when
 * RateLimitUnit has no such unit, which request validation then rejects. */
export function overrideCodeOf(name: string): number {
  return OVERRIDE_UNITS.indexOf(parseUnit(name));
}

/** A token bucket is stored in ticks of 1/requests_per_unit ms, up to burst × window: beyond 2^53 a double
 * (in JavaScript and in Redis's Lua) is no longer exact, and the stores would stop agreeing. */
export function bucketIsExact(burst: number, unit: Unit, multiplier = 1): boolean {
  return burst * UNITS[unit].seconds * multiplier * 1000 <= Number.MAX_SAFE_INTEGER;
}

/** The largest uint32: every count on the wire (requests_per_unit, hits_addend, limit_remaining) is one. */
export const MAX_UINT32 = 0xffff_ffff;

/** The largest limit a config may hold (requests_per_unit): 2^53 − 1, the largest count a double (in
 * JavaScript and in Redis's Lua) keeps exactly, so a token budget of 100 billion a month is one limit. The
 * RLS answer's uint32 fields clamp to MAX_UINT32; the headers carry the exact numbers. */
export const MAX_LIMIT = Number.MAX_SAFE_INTEGER;

/** The units `calendar: true` aligns to UTC calendar boundaries. */
export const CALENDAR_UNITS: readonly Unit[] = ['day', 'week', 'month', 'year'];

/** A window of unit × unit_multiplier is at most this long (ten years of seconds): far past any budget's
 * period, and short enough that every window index and expiry stays a small exact number. */
export const MAX_WINDOW_SECONDS = 10 * 365 * 86_400;

/** A window in words, from its unit and the name its key goes by (counters/keys.ts windowName: `.xN` a
 * multiplier, `.cal` a calendar window): "hour", "calendar month", "5 minutes", "2 calendar weeks". */
export function windowText(l: { unit: string; windowName: string }): string {
  const calendar = l.windowName.endsWith('.cal') ? 'calendar ' : '';
  const times = /\.x(\d+)/.exec(l.windowName)?.[1];
  return times ? `${times} ${calendar}${l.unit}s` : `${calendar}${l.unit}`;
}
