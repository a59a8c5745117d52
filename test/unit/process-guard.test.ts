import { EventEmitter } from 'node:events';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { fingerprint } from '../../src/fingerprint.js';
import { describeUnknown, guardProcess } from '../../src/process-guard.js';

describe('describeUnknown: what a log line says of an error nobody handled', () => {
  it('a message with lines that look like stack frames: none of it is read as where the error was thrown', () => {
    const err = new Error('value secret-1\n    at secret-2 (secret-3.js:1:1)');
    const d = describeUnknown(err);
    expect(JSON.stringify(d)).not.toContain('secret');
    expect(d).toMatchObject({ kind: 'Error', messageLength: err.message.length, messageFingerprint: fingerprint(err.message) });
    expect(String(d.at)).toContain('process-guard.test.ts');
  });

  it('a stack made some other way, a subclass, a value that is not an Error', () => {
    const odd = new TypeError('secret-4');
    odd.stack = 'secret-5\n    at secret-6';
    expect(describeUnknown(odd)).toEqual({ kind: 'TypeError', messageLength: 8, messageFingerprint: fingerprint('secret-4'), at: undefined });
    expect(describeUnknown('secret-7')).toEqual({ kind: 'string' });
    expect(describeUnknown(undefined)).toEqual({ kind: 'undefined' });
  });

  it('never throws: a revoked Proxy, a getter that throws, a message that is not a string', () => {
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    const throwing = new Error('secret-8');
    Object.defineProperty(throwing, 'stack', {
      get() {
        throw new Error('secret-9');
      },
    });
    const numeric = new Error('x');
    (numeric as { message: unknown }).message = 42;
    for (const odd of [proxy, throwing, numeric]) expect(JSON.stringify(describeUnknown(odd))).not.toContain('secret');
    expect(describeUnknown(proxy)).toEqual({ kind: 'unreadable' });
    expect(describeUnknown(numeric)).toEqual({ kind: 'unreadable' });
  });

  it('an empty message, and a name set after the error was made: the frame is still found', () => {
    expect(String(describeUnknown(new Error()).at)).toContain('process-guard.test.ts');
    const renamed = new Error('m');
    renamed.name = 'Renamed';
    expect(String(describeUnknown(renamed).at)).toContain('process-guard.test.ts');
  });
});

describe('guardProcess', () => {
  it('counts each unhandled rejection, and exits 1 once on uncaught exceptions', () => {
    const target = new EventEmitter();
    let unhandled = 0;
    const exits: number[] = [];
    guardProcess(pino({ level: 'silent' }), { unhandled: () => unhandled++, exit: (code) => exits.push(code) }, target);
    target.emit('unhandledRejection', new Error('a'));
    target.emit('unhandledRejection', 'b');
    expect([unhandled, exits]).toEqual([2, []]);
    target.emit('uncaughtException', new Error('c'));
    target.emit('uncaughtException', new Error('d')); // while the first one's line leaves: not a second exit
    expect(exits).toEqual([1]);
  });
});
