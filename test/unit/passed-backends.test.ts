import { describe, expect, it } from 'vitest';
import { fingerprint } from '../../src/fingerprint.js';
import type { DecisionInput } from '../../src/limiter/limiter.js';
import { passedBackends } from '../../src/response/passed-backends.js';
import { harness } from '../helpers/decide.js';

// passedBackends' grouping (src/response/passed-backends.ts), as envoyproxy/ratelimit PR #1243's quotaGroupKey and
// passedBackendsList have it: a group is the descriptors sharing backend_name and model_name_override, over when
// any of them is; each group listed once; a descriptor with neither key never listed.

const CONFIG = `domain: q
descriptors:
  - key: backend_name
    value: a
    descriptors:
      - key: model_name_override
        value: m
        quota_mode: true
        rate_limit: {unit: hour, requests_per_unit: 10}
        descriptors:
          - {key: tenant, quota_mode: true, rate_limit: {unit: hour, requests_per_unit: 1}}
  - key: backend_name
    value: b
    descriptors:
      - {key: model_name_override, value: m, quota_mode: true, shadow_mode: true, rate_limit: {unit: hour, requests_per_unit: 1}}
  - {key: other, quota_mode: true, rate_limit: {unit: hour, requests_per_unit: 1}}
  - {key: backend_name, value: "files/*", share_threshold: true, quota_mode: true, rate_limit: {unit: hour, requests_per_unit: 5}}
`;
const a = { backend_name: 'a', model_name_override: 'm' };
const aTenant = { ...a, tenant: 't1' };
const b = { backend_name: 'b', model_name_override: 'm' };
const input = (descriptors: Record<string, string>[]): DecisionInput =>
  ({ domain: 'q', hits: 1, descriptors: descriptors.map((d) => ({ entries: Object.entries(d).map(([key, value]) => ({ key, value })) })) }) as DecisionInput;

describe('passedBackends', () => {
  it("a group is over when any of its descriptors is: a's tenant bucket spent takes a out, though a's model bucket has room", async () => {
    const h = harness(CONFIG);
    const ds = [a, aTenant, b];
    const first = await h.decide('q', ds);
    expect(passedBackends(input(ds), first)).toEqual([
      { backend_name: 'a', model_name_override: 'm' },
      { backend_name: 'b', model_name_override: 'm' },
    ]); // a listed once for its two descriptors
    const second = await h.decide('q', ds); // a's tenant: 2 of 1; b over too, but in shadow_mode: it passes
    expect(second.descriptors.map((o) => o.over)).toEqual([false, true, true]);
    expect(passedBackends(input(ds), second)).toEqual([{ backend_name: 'b', model_name_override: 'm' }]);
  });

  it("a value a shared wildcard matched is the request's, not the config's: its fingerprint", async () => {
    const h = harness(CONFIG);
    const ds = [{ backend_name: 'files/SECRET-TOKEN' }];
    const listed = passedBackends(input(ds), await h.decide('q', ds));
    expect(listed).toEqual([{ backend_name: `fp:${fingerprint('files/SECRET-TOKEN')}`, model_name_override: '' }]);
  });

  it('no quota-mode descriptor, or none with either key left: no list', async () => {
    const h = harness(CONFIG);
    expect(passedBackends(input([{ other: 'x' }]), await h.decide('q', [{ other: 'x' }]))).toBeUndefined();
    expect(passedBackends(input([{ plain: 'y' }]), await h.decide('q', [{ plain: 'y' }]))).toBeUndefined();
  });
});
