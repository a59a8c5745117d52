import { EventEmitter } from 'node:events';
import { describe, expect, it } from 'vitest';
import { signals } from '../../src/commands/serve.js';

describe("serve's SIGTERM and SIGINT", () => {
  it('a signal that comes while the service starts stops it once it is up, once', () => {
    const proc = new EventEmitter();
    const whenUp = signals(proc);
    proc.emit('SIGTERM'); // during the start: no stop to call yet
    proc.emit('SIGINT');
    const stopped: string[] = [];
    whenUp((signal) => stopped.push(signal));
    expect(stopped).toEqual(['SIGTERM']);
  });

  it('once up, each signal reaches the stop', () => {
    const proc = new EventEmitter();
    const whenUp = signals(proc);
    const stopped: string[] = [];
    whenUp((signal) => stopped.push(signal));
    expect(stopped).toEqual([]);
    proc.emit('SIGINT');
    proc.emit('SIGTERM');
    expect(stopped).toEqual(['SIGINT', 'SIGTERM']);
  });
});
