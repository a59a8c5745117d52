import { describe, expect, it } from 'vitest';
import { diffDigests, ruleDigest } from '../../src/config/rule-diff.js';
import { compileYaml } from '../helpers/decide.js';

// What a reload reports as changed (src/config/rule-diff.ts): the settings that decide a rule's counts, so an
// operator's change shows in the reload line. Read from two compiled configs that differ in one setting each.

const base = (extra: string, inFlight = '{limit: 2, lease: 1m, request_key: request_id}') => `
domain: d
descriptors:
  - key: plan
    rate_limit: {unit: hour, requests_per_unit: 3}${extra}
  - key: tenant
    in_flight: ${inFlight}
`;

const changed = (a: string, b: string): string[] => diffDigests(ruleDigest(compileYaml(a)), ruleDigest(compileYaml(b))).changed;

describe('a reload reports as changed', () => {
  it('nothing, when nothing changed', () => {
    expect(changed(base(''), base(''))).toEqual([]);
  });

  it('a rule whose refunds are turned off', () => {
    expect(changed(base(''), base('\n    refunds: false'))).toEqual(['d/plan']);
  });

  it("a limit renamed, or one that replaces another; a rule's charge mode", () => {
    expect(changed(base(''), base(', name: hourly}').replace('3}, name', '3, name'))).toEqual(['d/plan']);
    const charged = (on: boolean) => `
domain: d
descriptors:
  - key: plan
    charge_mode: ${on}
    rate_limit: {unit: hour, requests_per_unit: 3}
`;
    expect(changed(charged(true), charged(false))).toEqual(['d/plan']);
  });

  it("an in_flight rule's lease or request key", () => {
    expect(changed(base(''), base('', '{limit: 2, lease: 5m, request_key: request_id}'))).toEqual(['d/tenant']);
    expect(changed(base(''), base('', '{limit: 2, lease: 1m, request_key: req}'))).toEqual(['d/tenant']);
  });
});
