/** The round-based fuzzers' judges must be able to fail: each is shown right answers, which it passes, and a
 * planted wrong one, which it names. (The RLQS smoke test plants one end to end: the known descriptor judged
 * against a limit one higher than the config's.) */
import { describe, expect, it } from 'vitest';
import type { RlsResponse } from '../helpers/service.js';
import { Findings, LeakScanner } from './fuzz-lib.js';
import { judgeAction, Reported, RLQS_DOMAIN } from './rlqs-judge.js';
import { judgeKnown } from './soak-lib.js';
import { checkLog } from './soak-run.js';
import { AdsStreamRecord, type DiscoveryRequest, Ledger } from './xds-ledger.js';

const KNOWN = { domain: 'd', key: 'check', limit: 3 };
const answer = (code: string, remaining: number, limit = 3): RlsResponse => ({
  overall_code: code,
  statuses: [{ code, current_limit: { name: 'n', requests_per_unit: limit, unit: 'HOUR' }, limit_remaining: remaining, duration_until_reset: null }],
  response_headers_to_add: [],
  request_headers_to_add: [],
  raw_body: Buffer.alloc(0),
});
const right = [answer('OK', 2), answer('OK', 1), answer('OK', 0), answer('OVER_LIMIT', 0), answer('OVER_LIMIT', 0)];

describe('the known descriptor', () => {
  it('passes the answers its limit gives', () => expect(judgeKnown(right, KNOWN)).toBeUndefined());

  it('names an answer past the limit, a remaining off by one, and another limit', () => {
    expect(judgeKnown([...right.slice(0, 3), answer('OK', 0), answer('OVER_LIMIT', 0)], KNOWN)).toMatch(/^call 4 of 5: .*"OK"/);
    expect(judgeKnown([answer('OK', 2), answer('OK', 2), ...right.slice(2)], KNOWN)).toMatch(/^call 2 of 5/);
    expect(
      judgeKnown(
        right.map((a) => ({ ...a, statuses: a.statuses.map((s) => ({ ...s, current_limit: { ...s.current_limit!, requests_per_unit: 4 } })) })),
        KNOWN,
      ),
    ).toMatch(/current_limit/);
  });
});

describe('an RLQS answer', () => {
  const reported = new Reported(RLQS_DOMAIN);
  reported.add({ tenant: 'a' });
  reported.add({ watched: 'x' });
  reported.add({ tenant: '' }, true);
  const bucket = (max: number, perFill: number, seconds: number) => ({
    token_bucket: { max_tokens: max, tokens_per_fill: { value: perFill }, fill_interval: { seconds } },
  });
  const action = (id: Record<string, string>, strategy: object, ttl = 3) => ({
    bucket_id: { bucket: Object.fromEntries(Object.entries(id).map(([k, v]) => [k, Buffer.from(v)])) },
    quota_assignment_action: { assignment_time_to_live: { seconds: ttl }, rate_limit_strategy: strategy },
  });

  it('passes a token bucket within the rule, ALLOW_ALL for a shadow rule, and abandon', () => {
    expect(judgeAction(action({ tenant: 'a' }, { strategy: 'token_bucket', ...bucket(100, 1000, 10) }), reported)).toBeUndefined();
    expect(judgeAction(action({ watched: 'x' }, { strategy: 'blanket_rule', blanket_rule: 0 }), reported)).toBeUndefined();
    expect(judgeAction({ bucket_id: { bucket: { tenant: Buffer.from('a') } }, abandon_action: {} }, reported)).toBeUndefined();
  });

  it('names a bucket never reported, one past the bounds, a rate over the rule, DENY_ALL for a shadow rule, a zero TTL', () => {
    expect(judgeAction(action({ tenant: 'b' }, { strategy: 'blanket_rule', blanket_rule: 0 }), reported)).toMatch(/never reported/);
    expect(judgeAction(action({ tenant: '' }, { strategy: 'blanket_rule', blanket_rule: 0 }), reported)).toMatch(/past the bounds/);
    expect(judgeAction(action({ tenant: 'a' }, { strategy: 'token_bucket', ...bucket(100, 101, 1) }), reported)).toMatch(/over the rule's 100\/s/);
    expect(judgeAction(action({ watched: 'x' }, { strategy: 'blanket_rule', blanket_rule: 1 }), reported)).toMatch(/DENY_ALL for a bucket no rule limits/);
    expect(judgeAction(action({ tenant: 'a' }, { strategy: 'blanket_rule', blanket_rule: 0 }, 0), reported)).toMatch(/TTL/);
  });
});

describe('the xDS ledger', () => {
  const req = (version: string, nonce: string, nack?: string): DiscoveryRequest => ({
    version_info: version,
    node: nonce === '' ? { id: 'n' } : null,
    type_url: 't',
    response_nonce: nonce,
    error_detail: nack === undefined ? null : { code: 13, message: nack },
  });

  it('passes a stream that opens, ACKs a valid config and NACKs an invalid one with the version before', () => {
    const ledger = new Ledger('n');
    const s = new AdsStreamRecord();
    ledger.request(s, req('', ''));
    ledger.sent(s, 'n1', 'v1', 'ack');
    ledger.request(s, req('v1', 'n1'));
    ledger.sent(s, 'n2', 'v2', 'nack');
    ledger.request(s, req('v1', 'n2', 'bad unit'));
    const again = new AdsStreamRecord();
    ledger.request(again, req('v1', ''));
    expect(ledger.problems).toEqual([]);
  });

  it('names an invalid config ACKed, a valid one NACKed, an unknown nonce, an answer to another type, a NACK with the rejected version', () => {
    const ledger = new Ledger('n');
    const s = new AdsStreamRecord();
    ledger.request(s, req('', ''));
    ledger.sent(s, 'n1', 'v1', 'nack');
    ledger.request(s, req('v1', 'n1'));
    ledger.sent(s, 'n2', 'v2', 'ack');
    ledger.request(s, req('', 'n2', 'why'));
    ledger.request(s, req('', 'n9'));
    ledger.sent(s, 'n3', 'v3', 'none');
    ledger.request(s, req('', 'n3'));
    ledger.sent(s, 'n4', 'v4', 'either');
    ledger.request(s, req('v4', 'n4', 'rejected'));
    expect(ledger.problems).toEqual([
      'an invalid config was ACKed (version "v1")',
      'a valid config was NACKed: "why"',
      'a request names nonce "n9", never sent on its stream',
      'a response of a type not subscribed to was answered (nonce "n3")',
      'a NACK carries the rejected version "v4"',
    ]);
  });
});

describe('the log and the marker', () => {
  it('a round whose log passed its bounds is named, one within them is not', () => {
    const f = new Findings();
    checkLog({ bytes: 10_000, lines: 50, longest: 300 }, { bytes: 0, lines: 0, longest: 0 }, 5, 1, f);
    expect(f.count).toBe(0);
    checkLog({ bytes: 3 * 1024 * 1024, lines: 3, longest: 1024 * 1024 }, { bytes: 0, lines: 0, longest: 0 }, 5, 2, f);
    checkLog({ bytes: 200_000, lines: 5000, longest: 200 }, { bytes: 0, lines: 0, longest: 0 }, 5, 3, f);
    expect(f.first.map((x) => x.index)).toEqual([2, 3]);
  });

  it('the marker is found in a log even when split across two chunks', () => {
    const scanner = new LeakScanner('ZQXJKLMNPQRSTVWX');
    const scan = scanner.stream('log');
    scan('{"msg":"rlqs stream ended","instance":"zqxjklmn');
    scan('pqrstvwx"}\n');
    expect(scanner.leaks.count).toBe(1);
  });
});
