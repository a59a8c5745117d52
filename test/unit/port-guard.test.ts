import { EventEmitter } from 'node:events';
import type { ServerHttp2Stream } from 'node:http2';
import type { Socket } from 'node:net';
import { gzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { ByteBudget, Hold } from '../../src/server/byte-budget.js';
import { ConnectionGate } from '../../src/server/connection-gate.js';
import { inflateWithin } from '../../src/server/inflate.js';
import { screenStream } from '../../src/server/stream-screen.js';

/** A socket as the gate sees one: its address, destroy() and 'close'. */
class FakeSocket extends EventEmitter {
  destroyed = false;
  constructor(readonly remoteAddress: string) {
    super();
  }
  destroy(): void {
    this.destroyed = true;
    this.emit('close');
  }
}

describe('connections gated per address, in all, and paced', () => {
  const bounds = { perAddress: 3, inAll: 5, burst: 4, perSecond: 2 };

  it('refuses past the address bound and the total, and a closed connection makes room', () => {
    let now = 0;
    const gate = new ConnectionGate(bounds, () => now);
    const a = Array.from({ length: 4 }, () => new FakeSocket('10.0.0.1'));
    expect(a.map((s) => gate.admit(s as unknown as Socket))).toEqual([undefined, undefined, undefined, 'address']);
    expect(a[3]!.destroyed).toBe(true);
    const b = Array.from({ length: 3 }, () => new FakeSocket('10.0.0.2'));
    expect(b.map((s) => gate.admit(s as unknown as Socket))).toEqual([undefined, undefined, 'total']);
    a[0]!.destroy();
    expect(gate.size).toBe(4);
    now += 10_000;
    expect(gate.admit(new FakeSocket('10.0.0.2') as unknown as Socket)).toBeUndefined();
  });

  it('paces new connections after a burst, and an address ended for abuse waits a second, longer on repeats', () => {
    let now = 0;
    const gate = new ConnectionGate({ ...bounds, perAddress: 100, inAll: 100 }, () => now);
    const open = (): string | undefined => gate.admit(new FakeSocket('10.0.0.3') as unknown as Socket);
    expect([open(), open(), open(), open(), open()]).toEqual([undefined, undefined, undefined, undefined, 'pace']);
    now += 500; // 2 a second: one more
    expect([open(), open()]).toEqual([undefined, 'pace']);
    // A penalty puts the address a second's worth of connections below none: a second and a connection's pace.
    gate.penalize('10.0.0.3');
    now += 1499;
    expect(open()).toBe('pace');
    now += 2;
    expect(open()).toBeUndefined();
    gate.penalize('10.0.0.3');
    gate.penalize('10.0.0.3'); // a repeat while it waits: a second more (at most a burst below none)
    now += 2400;
    expect(open()).toBe('pace');
    now += 200;
    expect(open()).toBeUndefined();
  });
});

describe('the byte budget, per connection and in all', () => {
  it('refuses a take past either bound and takes nothing then; a hold gives back what it took, once', () => {
    const budget = new ByteBudget(100, 150);
    const one = budget.ledger({});
    const two = budget.ledger({});
    const h1 = new Hold(budget, one);
    expect(h1.take(60)).toBe(true);
    expect(h1.take(50)).toBe(false); // past this connection's 100
    expect(one.held).toBe(60);
    const h2 = new Hold(budget, two);
    expect(h2.take(90)).toBe(true);
    expect(h2.take(1)).toBe(false); // past 150 in all, though this connection has room
    h1.release();
    h1.release();
    expect(budget.total).toBe(90);
    expect(h1.take(1)).toBe(false); // given back: a late take (an inflation of a reset call) takes nothing
    expect(budget.total).toBe(90);
    expect(h2.take(60)).toBe(false); // its own 100
    expect(h2.take(10)).toBe(true);
  });
});

describe('streams screened before grpc-js sees them', () => {
  const limits = { defaultDeadlineMs: 10_000, streaming: new Set(['/s/Watch']) };
  /** A stream that records what it is answered. */
  const answered = (): { stream: ServerHttp2Stream; sent: Record<string, unknown>[] } => {
    const sent: Record<string, unknown>[] = [];
    const stream = Object.assign(new EventEmitter(), { respond: (h: Record<string, unknown>) => sent.push(h), session: {} });
    return { stream: stream as unknown as ServerHttp2Stream, sent };
  };

  it('gives a unary call without grpc-timeout the server deadline, and a streaming one none', () => {
    const unary: Record<string, string> = { ':path': '/s/Check' };
    expect(screenStream(answered().stream, unary, limits)).toBe(true);
    expect(unary['grpc-timeout']).toBe('10000m');
    const watch: Record<string, string> = { ':path': '/s/Watch' };
    expect(screenStream(answered().stream, watch, limits)).toBe(true);
    expect(watch['grpc-timeout']).toBeUndefined();
  });

  it('drops, unread, the headers grpc-js would log with their values', () => {
    const headers: Record<string, string> = { ':path': '/s/Check', 'x-ok': 'fine', 'x-bad': 'caf\u00e9 secret', 'X-Upper': 'secret' };
    expect(screenStream(answered().stream, headers, limits)).toBe(true);
    expect(Object.keys(headers).sort()).toEqual([':path', 'grpc-timeout', 'x-ok']);
  });

  it('answers an unreadable grpc-timeout or an unknown encoding itself, naming neither', () => {
    const a = answered();
    expect(screenStream(a.stream, { ':path': '/s/Check', 'grpc-timeout': 'soon-secret' }, limits)).toBe(false);
    expect(a.sent[0]).toMatchObject({ 'grpc-status': '13', 'grpc-message': encodeURI('Invalid grpc-timeout value (11 characters)') });
    const b = answered();
    expect(screenStream(b.stream, { ':path': '/s/Check', 'grpc-encoding': 'br-secret' }, limits)).toBe(false);
    expect(String(b.sent[0]!['grpc-message'])).not.toContain('secret');
  });
});

describe('a message inflated within a hold', () => {
  it('takes what it inflates to; a bomb stops at the limit or the budget, and garbage is corrupt', async () => {
    const budget = new ByteBudget(1 << 20, 1 << 20);
    const small = new Hold(budget, budget.ledger({}));
    const plain = Buffer.alloc(20_000, 7);
    expect(await inflateWithin(gzipSync(plain), 'gzip', small, 256 * 1024)).toEqual(plain);
    expect(budget.total).toBe(20_000); // what it inflated to, not the 256 KiB limit
    small.release();
    const bomb = gzipSync(Buffer.alloc(4 << 20));
    await expect(inflateWithin(bomb, 'gzip', new Hold(budget, budget.ledger({})), 256 * 1024)).rejects.toBe('too_large');
    const tight = new ByteBudget(300 * 1024, 1 << 20);
    const held = new Hold(tight, tight.ledger({}));
    await expect(inflateWithin(bomb, 'gzip', held, 4 << 20)).rejects.toBe('busy');
    expect(tight.total).toBe(0); // refused whole: nothing taken
    held.release();
    await expect(inflateWithin(Buffer.from('not gzip'), 'deflate', new Hold(budget, budget.ledger({})), 1024)).rejects.toBe('corrupt');
  });
});
