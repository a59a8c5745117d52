import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { LogSink, MAX_PENDING_BYTES } from '../../src/log-sink.js';

/** A stdout whose reader takes each chunk only when the test says so (a pipe nobody reads, then one read). */
function stuckOutput(): { out: Writable; taken: string[]; release: () => void } {
  const waiting: (() => void)[] = [];
  const taken: string[] = [];
  const out = new Writable({
    highWaterMark: 16 * 1024,
    write(chunk: Buffer, _enc, done) {
      waiting.push(() => {
        taken.push(chunk.toString());
        done();
      });
    },
  });
  const release = (): void => {
    // Each completion may let the stream hand over the next chunk: take them until none waits.
    while (waiting.length > 0) waiting.shift()!();
  };
  return { out, taken, release };
}

describe('LogSink', () => {
  it('holds at most MAX_PENDING_BYTES for a reader that does not read, drops the rest, and says so once each way', () => {
    const { out, taken, release } = stuckOutput();
    const notes: string[] = [];
    const sink = new LogSink(out, (t) => notes.push(t));
    const line = `${'x'.repeat(1023)}\n`;
    const lines = (2 * MAX_PENDING_BYTES) / line.length;
    for (let i = 0; i < lines; i++) sink.write(line);
    expect(out.writableLength).toBeLessThanOrEqual(MAX_PENDING_BYTES + line.length);
    expect(notes).toHaveLength(1);
    expect(notes[0]).toMatch(/stdout is not being read/);
    release();
    while (out.writableLength > 0) release();
    sink.write('after\n');
    expect(notes[1]).toMatch(/stdout is read again: \d+ log lines were dropped meanwhile/);
    const dropped = Number(/: (\d+) log lines/.exec(notes[1]!)![1]);
    release();
    expect(taken.length + dropped).toBe(lines + 1);
    expect(taken.at(-1)).toBe('after\n');
  });

  it('flush waits for queued lines, at most as long as it is given', async () => {
    const { out, release } = stuckOutput();
    const sink = new LogSink(out, () => undefined);
    await sink.flush(1000); // nothing queued: at once
    sink.write('line\n');
    const started = performance.now();
    await sink.flush(50); // a reader that never reads: the bound, not forever
    expect(performance.now() - started).toBeGreaterThanOrEqual(45);
    let flushed = false;
    const done = sink.flush(60_000).then(() => (flushed = true));
    release();
    await new Promise((r) => setImmediate(r));
    release();
    await done;
    expect(flushed).toBe(true);
  });

  it('a broken output (EPIPE): no more writes, one note, never an exception; flush returns at once', async () => {
    let writes = 0;
    const out = new Writable({
      write(_chunk, _enc, done) {
        writes++;
        done(Object.assign(new Error('write EPIPE'), { code: 'EPIPE' }));
      },
    });
    const notes: string[] = [];
    const sink = new LogSink(out, (t) => notes.push(t));
    sink.write('first\n');
    await new Promise((r) => setImmediate(r));
    for (let i = 0; i < 10; i++) sink.write('more\n');
    await sink.flush(60_000);
    expect(writes).toBe(1);
    expect(notes).toEqual(['tollgate: stdout failed (EPIPE): log lines are dropped from now on; serving goes on\n']);
  });

  it('an output whose write throws (a file: ENOSPC, EBADF) is taken as broken, not thrown to the logging code', () => {
    const out = new Writable({ write: () => undefined });
    out.write = () => {
      throw Object.assign(new Error('EBADF'), { code: 'EBADF' });
    };
    const notes: string[] = [];
    const sink = new LogSink(out, (t) => notes.push(t));
    expect(() => sink.write('x\n')).not.toThrow();
    expect(notes[0]).toMatch(/stdout failed \(EBADF\)/);
  });
});
