import { describe, expect, it } from 'vitest';
import { matchKind, matchRule, step } from '../../src/config/match.js';
import { compileYaml, domainOf, entries } from '../helpers/decide.js';

// The shorter wildcard is written first: envoyproxy/ratelimit tries wildcards in file order, so it wins.
const MATCH = `
domain: match
descriptors:
  - key: path
    value: /api/*
    rate_limit: {unit: second, requests_per_unit: 2, name: api-prefix}
  - key: path
    value: /api/v2/*
    rate_limit: {unit: second, requests_per_unit: 3, name: api-v2-prefix}
  - key: path
    value: /api/v2/admin
    rate_limit: {unit: second, requests_per_unit: 1, name: exact-admin}
  - key: path
    rate_limit: {unit: second, requests_per_unit: 4, name: any-path}
  - key: host
    value: "*"
    rate_limit: {unit: second, requests_per_unit: 5, name: any-host-wildcard}
  - key: host
    rate_limit: {unit: second, requests_per_unit: 6, name: host-default}
  - key: category
    value: read
    rate_limit: {unit: second, requests_per_unit: 7, name: read-anonymous}
    descriptors:
      - key: token
        rate_limit: {unit: second, requests_per_unit: 8, name: read-token}
      - key: token
        value: internal-*
        rate_limit: {unlimited: true}
  - key: category
    value: write
    descriptors:
      - key: token
        rate_limit: {unit: second, requests_per_unit: 9, name: write-token}
`;

const domain = domainOf(compileYaml(MATCH), 'match');
const ruleFor = (kv: Record<string, string>): string | undefined => matchRule(domain, entries(kv))?.limits[0]?.name;

describe('matchRule: exact value, then the first wildcard in file order, then the default key', () => {
  it('an exact value wins over every wildcard that also covers it and over the default', () => {
    expect(ruleFor({ path: '/api/v2/admin' })).toBe('exact-admin');
  });

  it('the first matching wildcard in file order wins (envoyproxy/ratelimit GetLimit), not the longest', () => {
    expect(ruleFor({ path: '/api/v2/users' })).toBe('api-prefix');
    expect(ruleFor({ path: '/api/v1/users' })).toBe('api-prefix');
    // A prefix is a prefix of the whole value: "/api/v2" lacks the slash "/api/v2/*" asks for.
    expect(ruleFor({ path: '/api/v2' })).toBe('api-prefix');
  });

  it('the default key takes every value nothing more specific matches, the empty value included', () => {
    expect(ruleFor({ path: '/health' })).toBe('any-path');
    expect(ruleFor({ path: '' })).toBe('any-path');
    expect(ruleFor({ path: '/ap' })).toBe('any-path');
    expect(ruleFor({ path: '/v1/api/v2/users' })).toBe('any-path'); // holds a prefix, but not at its start
  });

  it('a bare "*" is a wildcard of empty prefix: it is preferred to the default key', () => {
    expect(ruleFor({ host: 'example.com' })).toBe('any-host-wildcard');
  });

  it('nested entries match level by level; the rule is the one on the node the last entry reaches', () => {
    expect(ruleFor({ category: 'read' })).toBe('read-anonymous');
    expect(ruleFor({ category: 'read', token: 'Bearer abc' })).toBe('read-token');
    expect(matchRule(domain, entries({ category: 'read', token: 'internal-42' }))?.unlimited).toBe(true);
    expect(ruleFor({ category: 'write', token: 'Bearer abc' })).toBe('write-token');
  });

  it('no rule: a node without limits, an unknown key or value, entries out of order, an entry too many', () => {
    expect(matchRule(domain, entries({ category: 'write' }))).toBeUndefined();
    expect(matchRule(domain, entries({ category: 'delete', token: 'x' }))).toBeUndefined();
    expect(matchRule(domain, entries({ colour: 'blue' }))).toBeUndefined();
    expect(matchRule(domain, entries({ token: 'x', category: 'read' }))).toBeUndefined();
    expect(matchRule(domain, entries({ category: 'read', token: 'x', extra: 'y' }))).toBeUndefined();
    expect(matchRule(domain, [])).toBeUndefined();
  });

  it('no backtracking: once an exact value is taken, a miss below it does not retry the wildcard or default', () => {
    // exact-admin has no children; /api/v2/* has none either, but the walk never gets to try it.
    expect(matchRule(domain, entries({ path: '/api/v2/admin', method: 'GET' }))).toBeUndefined();
  });

  it('ids and counter ids follow the path of keys and values matched', () => {
    const rule = matchRule(domain, entries({ category: 'read', token: 'Bearer abc' }))!;
    expect(rule.id).toBe('category_read.token');
    expect(rule.keys).toEqual(['category', 'token']);
    expect(rule.variable).toEqual([false, true]);
    const wildcard = matchRule(domain, entries({ path: '/api/v2/x' }))!;
    expect(wildcard.id).toBe('path_/api/*');
    expect(wildcard.variable).toEqual([true]);
  });
});

describe('step and matchKind say which of the three ways a value matched', () => {
  const branch = domain.root.get('path')!;
  it.each([
    ['/api/v2/admin', 'exact', undefined],
    ['/api/v2/users', 'wildcard', '/api/*'],
    ['/api/v1', 'wildcard', '/api/*'],
    ['/elsewhere', 'default', undefined],
  ])('%s: %s %s', (value, kind, pattern) => {
    const node = step(branch, value)!;
    expect(node).toBeDefined();
    const how = matchKind(branch, node, value);
    expect(how.kind).toBe(kind);
    expect(how.pattern).toBe(pattern);
  });

  it('a level offers only the keys the config uses there; a default key takes any value', () => {
    const write = step(domain.root.get('category')!, 'write')!;
    expect(step(write.children!.get('token')!, 'anything')?.rule?.limits[0]?.name).toBe('write-token');
    const read = step(domain.root.get('category')!, 'read')!;
    expect(read.children!.get('path')).toBeUndefined();
  });
});

// envoyproxy/ratelimit's README, Example 9, and its wildcardMatch: a "*" anywhere, any number of them, each
// matching any run of characters, the empty one included.
describe('wildcards anywhere in the value', () => {
  const GLOBS = `
domain: globs
descriptors:
  - {key: path, value: /api/*/action, rate_limit: {unit: minute, requests_per_unit: 1, name: middle}}
  - {key: path, value: /api/*/resource/*/action, rate_limit: {unit: minute, requests_per_unit: 2, name: two}}
  - {key: path, value: "*.pdf", rate_limit: {unit: minute, requests_per_unit: 3, name: suffix}}
  - {key: mid, value: bar*b, rate_limit: {unit: minute, requests_per_unit: 4, name: bar-b}}
  - {key: multi, value: foo*bar*baz, rate_limit: {unit: minute, requests_per_unit: 5, name: foo-bar-baz}}
  - {key: multi, value: "**", rate_limit: {unit: minute, requests_per_unit: 6, name: stars}}
`;
  const globs = domainOf(compileYaml(GLOBS), 'globs');
  const rule = (key: string, value: string): string | undefined => matchRule(globs, [{ key, value }])?.limits[0]?.name;

  it.each([
    ['path', '/api/123/action', 'middle'],
    ['path', '/api//action', 'middle'], // a * matches the empty run
    ['path', '/api/123/other', undefined],
    ['path', '/api/v1/resource/9/action', 'middle'], // the first in file order: /api/*/action matches it too
    ['path', 'x/report.pdf', 'suffix'],
    ['path', '.pdf', 'suffix'],
    ['mid', 'bab', undefined],
    ['mid', 'barb', 'bar-b'],
    ['mid', 'bar-and-b', 'bar-b'],
    ['mid', 'barn', undefined],
    ['multi', 'foobarbaz', 'foo-bar-baz'],
    ['multi', 'foo-x-bar-y-baz', 'foo-bar-baz'],
    ['multi', 'foobazbar', 'stars'], // the parts must come in order; "**" takes the rest
    ['multi', '', 'stars'],
  ])('%s=%s → %s', (key, value, name) => {
    expect(rule(key, value)).toBe(name);
  });

  it('explains which pattern matched', () => {
    const branch = globs.root.get('path')!;
    const node = step(branch, '/api/7/resource/8/action')!;
    expect(matchKind(branch, node, '/api/7/resource/8/action')).toEqual({ kind: 'wildcard', pattern: '/api/*/action', shared: false });
  });
});
