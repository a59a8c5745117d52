import { describe, expect, it } from 'vitest';
import { MAX_BUCKETS_PER_ADDRESS, MAX_STREAMS_PER_ADDRESS, MAX_STREAMS_PER_CONNECTION, RlqsBounds } from '../../src/rlqs/bounds.js';
import { CpuShare, Meter } from '../../src/rlqs/cpu.js';
import { RareLines } from '../../src/rlqs/log.js';

describe('RLQS stream and bucket bounds', () => {
  it('counts a stream when it opens: per connection, per address, in all; a release frees its place once', () => {
    const b = new RlqsBounds({ maxStreams: 100, maxBuckets: 1000 });
    const open = (peer: string) => b.openStream(peer);
    const first = Array.from({ length: MAX_STREAMS_PER_CONNECTION }, () => open('10.0.0.1:1000'));
    expect(first.every((s) => 'release' in s)).toBe(true);
    expect(open('10.0.0.1:1000')).toEqual({ refused: 'connection' });
    const second = Array.from({ length: MAX_STREAMS_PER_ADDRESS - MAX_STREAMS_PER_CONNECTION }, () => open('10.0.0.1:1001'));
    expect(second.every((s) => 'release' in s)).toBe(true);
    expect(open('10.0.0.1:1002')).toEqual({ refused: 'address' });
    const one = first[0] as { release: () => void };
    one.release();
    one.release(); // twice frees one place, not two
    expect('release' in open('[::ffff:10.0.0.1]:1002')).toBe(true); // the same address, however grpc-js spells it
    expect(open('10.0.0.1:1003')).toEqual({ refused: 'address' });
    for (let i = 0; i < 100 - MAX_STREAMS_PER_ADDRESS; i++) expect('release' in open(`10.0.1.${i}:1`)).toBe(true);
    expect(open('10.0.2.1:1')).toEqual({ refused: 'total' });
  });

  it('gives buckets to an address up to its bound and to all up to theirs, and takes them back', () => {
    const b = new RlqsBounds({ maxStreams: 100, maxBuckets: MAX_BUCKETS_PER_ADDRESS + 10 });
    const a = b.bucketBudget('10.0.0.1:1');
    const sameAddress = b.bucketBudget('10.0.0.1:2');
    let taken = 0;
    while (a.take()) taken++;
    expect(taken).toBe(MAX_BUCKETS_PER_ADDRESS);
    expect(sameAddress.take()).toBe(false);
    const other = b.bucketBudget('10.0.0.2:1');
    let more = 0;
    while (other.take()) more++;
    expect(more).toBe(10); // what the process has left
    a.give(5);
    expect(sameAddress.take()).toBe(true);
  });
});

describe("RLQS's share of the process", () => {
  it('lets work run while it is within its share, then holds the next turn until the share has paid for it', async () => {
    let now = 0;
    const cpu = new CpuShare(
      0.25,
      () => now,
      () => now,
    );
    await cpu.turn(); // idle: at once
    cpu.charge(100); // 100 ms of work at a 25% share: 400 ms of time to pay for it, less the 40 ms burst
    let turned = false;
    const next = cpu.turn().then(() => (turned = true));
    now = 200;
    await new Promise((r) => setTimeout(r, 5));
    expect(turned).toBe(false);
    expect(cpu.held).toBe(1);
    now = 241; // 40 + 241 × 0.25 − 100 > 0
    await next;
    expect(turned).toBe(true);
  });

  it('charges a piece of work the CPU time spent between its turns', async () => {
    let now = 0;
    let spent = 0;
    const cpu = new CpuShare(
      0.5,
      () => now,
      () => spent,
    );
    const meter = new Meter(cpu);
    spent += 200; // the work's first slice
    let turned = false;
    const next = meter.turn().then(() => (turned = true));
    await new Promise((r) => setTimeout(r, 5));
    expect([turned, cpu.held]).toEqual([false, 1]);
    now = 400; // 40 + 400 × 0.5 − 200 > 0
    await next;
    spent += 1000; // the work's second slice, charged when it ends
    meter.settle();
    expect(cpu.held).toBe(0);
    let again = false;
    void cpu.turn().then(() => (again = true));
    await new Promise((r) => setTimeout(r, 5));
    expect(again).toBe(false); // the 1,000 ms after the turn were charged at settle()
  });
});

describe('log lines a client can cause', () => {
  it('writes one line a minute per kind, with how many events since the last line', () => {
    let now = 0;
    const lines: { fields: Record<string, unknown>; msg: string }[] = [];
    const logger = { info: (fields: Record<string, unknown>, msg: string) => lines.push({ fields, msg }), warn: () => undefined };
    const rare = new RareLines(logger as never, () => now);
    for (let i = 0; i < 10_000; i++) rare.note('info', 'refused', { reason: 'x' }, 'refused');
    rare.note('info', 'other', {}, 'other');
    expect(lines.map((l) => [l.msg.split(' (')[0], l.fields.events])).toEqual([
      ['refused', 1],
      ['other', 1],
    ]);
    now = 60_000;
    rare.note('info', 'refused', { reason: 'x' }, 'refused');
    expect(lines.at(-1)!.fields.events).toBe(10_000);
  });
});
