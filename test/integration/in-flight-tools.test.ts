import { describe, expect, it } from 'vitest';
import { runCli } from '../helpers/process.js';

// The tools on an in_flight rule (issue 61, item 6): explain shows it as what it is (its kind, the request id
// entry, the op each call makes, a give-back with @hits=-N), and simulate, which cannot hold a slot for a
// request's duration, says so and exits non-zero instead of reporting 0 admitted, 0 rejected.

const EXAMPLE = 'examples/in-flight.yaml';
const ID = 'req-s3cr3t-42';

interface Shown {
  descriptors: {
    rule: { algorithm: string; requestKey?: string; leaseMs?: number } | null;
    steps: { key: string; value: string; matched: string }[];
    op?: string;
    firstToReject: string | null;
  }[];
}

async function explain(...extra: string[]): Promise<Shown> {
  const run = await runCli(['explain', '--config', EXAMPLE, '--json', 'inflight', 'tenant=acme', `request_id=${ID}`, ...extra]);
  expect(run.code, run.stderr).toBe(0);
  expect(run.stdout).not.toContain(ID);
  return JSON.parse(run.stdout) as Shown;
}

describe('explain on an in_flight rule', () => {
  it('names its kind, the request id entry (by fingerprint) and the take', async () => {
    const [d] = (await explain()).descriptors;
    expect(d!.rule).toMatchObject({ algorithm: 'in_flight', requestKey: 'request_id', leaseMs: 30_000, maxHoldMs: 900_000 });
    expect(d!.steps.map((s) => [s.key, s.matched])).toEqual([
      ['tenant', 'default'],
      ['request_id', 'id'],
    ]);
    expect(d!.steps[1]!.value).toMatch(/^fingerprint:/);
    expect(d!.op).toBe('take');
    expect(d!.firstToReject).toBe('inflight.tenant.in_flight');
  });

  it('shows a give-back with @hits=-1: never refused, so nothing is first to reject', async () => {
    const [d] = (await explain('@hits=-1')).descriptors;
    expect([d!.op, d!.firstToReject]).toEqual(['giveBack', null]);
    const text = await runCli(['explain', '--config', EXAMPLE, 'inflight', 'tenant=acme', `request_id=${ID}`, '@hits=-1']);
    expect(text.stdout).toContain('op: giveBack');
    expect(text.stdout).toContain('in_flight: a slot per request (its request_id entry), given back at its end, else returned after 30s');
    expect(text.stdout).toContain(', renewed while its Envoy is connected for up to 900s');
    expect(text.stdout).not.toContain('no match');
  });
});

describe('simulate with in_flight rules', () => {
  it('is refused with exit 2, naming the rules, instead of a report of nothing', async () => {
    const log = await runCli(['simulate', '--generate', '50']);
    const file = `${process.env.TMPDIR ?? '/tmp'}/inflight-traffic-${process.pid}.jsonl`;
    const { writeFileSync, rmSync } = await import('node:fs');
    writeFileSync(file, log.stdout);
    try {
      const run = await runCli(['simulate', '--traffic', file, '--config', EXAMPLE, '--envoy', 'envoy/envoy-inflight.yaml']);
      expect(run.code).toBe(2);
      expect(run.stderr).toMatch(/simulate cannot replay in_flight rules \(inflight\/tenant\)/);
      expect(run.stdout).toBe('');
    } finally {
      rmSync(file, { force: true });
    }
  });
});
