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
});

describe('guardProcess', () => {
  it('counts each unhandled rejection and exits 1 on an uncaught exception', () => {
    const target = new EventEmitter();
    let unhandled = 0;
    const exits: number[] = [];
    guardProcess(pino({ level: 'silent' }), { unhandled: () => unhandled++, exit: (code) => exits.push(code) }, target);
    target.emit('unhandledRejection', new Error('a'));
    target.emit('unhandledRejection', 'b');
    expect([unhandled, exits]).toEqual([2, []]);
    target.emit('uncaughtException', new Error('c'));
    expect(exits).toEqual([1]);
  });
});
