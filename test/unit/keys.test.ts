import { describe, expect, it } from 'vitest';
import {
  counterId,
  counterKey,
  counterKeyOf,
  eventsChannel,
  hashTag,
  overrideCounterKey,
  storeKey,
  tierHashKey,
  windowCounterName,
  windowKey,
} from '../../src/counters/keys.js';
import { fingerprint } from '../../src/fingerprint.js';

const SECRET = 'Bearer s3cr3t-token';
const entries = (...pairs: [string, string][]) => pairs.map(([key, value]) => ({ key, value }));

describe('counter keys (src/counters/keys.ts)', () => {
  it('counter id: domain and rule path, URL-encoded so config text holds no separator of its own', () => {
    expect(counterId('property-api', 'category_read.token')).toBe('property-api:category_read.token');
    // A ':' in the domain or the path cannot move the boundary between them…
    expect(counterId('a:b', 'c')).not.toBe(counterId('a', 'b:c'));
    expect(counterId('a:b', 'c')).toBe('a%3Ab:c');
    // …and braces in config text cannot open or close a hash tag.
    const id = counterId('d{x}', 'k_{y}');
    expect(id).not.toMatch(/[{}]/);
    expect(hashTag(counterKeyOf(id, ''))).toBe(id);
  });

  it('counter key: one fingerprint per varying value, in entry order, inside the hash tag', () => {
    const e = entries(['category', 'read'], ['token', SECRET], ['path', '/a']);
    const key = counterKey('d:r', [false, true, true], e);
    expect(key).toBe(`d:r:{${fingerprint(SECRET)}.${fingerprint('/a')}}`);
    expect(key).not.toContain('s3cr3t');
    expect(key).not.toContain('read');
  });

  it('counter key: a rule that fixes every value has one shared counter, tagged by the rule', () => {
    expect(counterKey('d:r', [false, false], entries(['a', '1'], ['b', '2']))).toBe('{d:r}');
    expect(counterKeyOf('d:r', '')).toBe('{d:r}');
  });

  it('counter key: a value cannot forge a separator, as only its fingerprint is used', () => {
    const forged = counterKey('d:r', [true], entries(['token', `x}:{y.z`]));
    expect(forged).toBe(`d:r:{${fingerprint('x}:{y.z')}}`);
    expect(forged).toMatch(/^d:r:\{[0-9a-f]{32}\}$/);
    // Two values cannot pass for one value with a '.' in it.
    expect(counterKey('d:r', [true, true], entries(['a', 'x'], ['b', 'y']))).not.toBe(counterKey('d:r', [true], entries(['a', 'x.y'])));
  });

  it('counter key from fingerprints: what a client known only by fingerprint has (the admin API)', () => {
    const fp = fingerprint(SECRET);
    expect(counterKeyOf('d:r', fp)).toBe(counterKey('d:r', [false, true], entries(['category', 'read'], ['token', SECRET])));
  });

  it('override key: request keys and values only as fingerprints, length bounded', () => {
    const e = entries(['s3cr3t-key'.repeat(1000), SECRET], ['other', 'v']);
    const key = overrideCounterKey('d', e);
    const keysFp = fingerprint(JSON.stringify(e.map((x) => x.key)));
    expect(key).toBe(`d:~override:${keysFp}:{${fingerprint(SECRET)}.${fingerprint('v')}}`);
    // No config rule can be given the override's id: its rule path is encoded, so it never holds that ':'.
    expect(counterKeyOf(counterId('d', `~override:${keysFp}`), `${fingerprint(SECRET)}.${fingerprint('v')}`)).not.toBe(key);
    expect(counterKeyOf(counterId('d', `~override.${keysFp}`), `${fingerprint(SECRET)}.${fingerprint('v')}`)).not.toBe(key);
    expect(key).not.toContain('s3cr3t');
    expect(key.length).toBeLessThan(200);
    // Other keys, other counters.
    expect(overrideCounterKey('d', entries(['k1', SECRET]))).not.toBe(overrideCounterKey('d', entries(['k2', SECRET])));
  });

  it("window key: the counter key and the unit; the hash tag is the counter key's", () => {
    const counter = counterKeyOf('d:r', 'ab');
    expect(windowKey(counter, 'hour')).toBe('d:r:{ab}:hour');
    expect(hashTag(windowKey(counter, 'hour'))).toBe('ab');
    expect(hashTag(windowKey('{d:r}', 'second'))).toBe('d:r');
  });

  it('store key: the namespace first; the hash tag is unchanged (a prefix holds no braces of ours)', () => {
    expect(storeKey('tollgate:', 'd:r:{ab}:hour')).toBe('tollgate:v2:d:r:{ab}:hour');
    expect(hashTag(storeKey('tollgate:', 'd:r:{ab}:hour'))).toBe('ab');
  });

  it("counter name (layout 2): the store key and the window's index since the epoch; same hash tag", () => {
    const key = storeKey('tollgate:', 'd:r:{ab}:hour');
    expect(windowCounterName(key, 3_600_000, 1_800_000_000_000)).toBe('tollgate:v2:d:r:{ab}:hour:500000');
    expect(windowCounterName(key, 3_600_000, 1_800_003_599_999)).toBe('tollgate:v2:d:r:{ab}:hour:500000');
    expect(windowCounterName(key, 3_600_000, 1_800_003_600_000)).toBe('tollgate:v2:d:r:{ab}:hour:500001');
    expect(hashTag(windowCounterName(key, 1000, 1_800_000_000_000))).toBe('ab');
  });

  it('keys are ASCII, so the memory store may copy them as latin1', () => {
    const key = windowKey(counterKey(counterId('dömäin', 'ключ_värde'), [true], entries(['k', 'välue'])), 'day');
    expect(key).toMatch(/^[\x20-\x7e]+$/);
  });

  it('tier hash and events channel: under the prefix, and never the name of a counter', () => {
    expect(tierHashKey('tollgate:')).toBe('tollgate:tiers');
    expect(eventsChannel('tollgate:')).toBe('tollgate:events');
    // Every store key holds a ':' after the prefix (domain:rule path); these hold none.
    expect(storeKey('tollgate:', windowKey(counterKeyOf(counterId('tiers', ''), ''), 'hour'))).not.toBe(tierHashKey('tollgate:'));
    expect(tierHashKey('p:').slice(2)).not.toContain(':');
  });
});
