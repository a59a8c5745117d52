import { afterEach, describe, expect, it } from 'vitest';
import { fingerprint } from '../../src/fingerprint.js';
import { type Daemon, freePort, loopback, startCli } from '../helpers/process.js';
import { bounded, within } from '../helpers/time.js';

/** A bug's stray promise or exception in a serving process (src/process-guard.ts): a rejection nobody handled is
 * logged and counted and the service goes on (Node's default ended the process); an uncaught exception ends it
 * with exit code 1 through one log line. Neither writes the error's message, which may quote a request. */

const PRELOAD = ['--require', './test/fixtures/preload/stray-failure.cjs'];
const SECRET = 'secret-value-7f3a';

let daemon: Daemon | undefined;
afterEach(() => {
  if (daemon && daemon.child.exitCode === null && daemon.child.signalCode === null) daemon.child.kill('SIGKILL');
  daemon = undefined;
});

async function serve(kind: 'reject' | 'throw'): Promise<{ d: Daemon; httpPort: number }> {
  const [grpcPort, httpPort] = [await freePort(), await freePort()];
  const d = await startCli(['serve', ...loopback(grpcPort, httpPort)], /tollgate serving/, { STRAY_FAILURE: kind }, PRELOAD);
  daemon = d;
  return { d, httpPort };
}

const logLine = (out: string, msg: string): Record<string, unknown> => {
  const line = out.split('\n').find((l) => l.includes(msg));
  if (!line) throw new Error(`no "${msg}" line`);
  return JSON.parse(line) as Record<string, unknown>;
};

describe('a bug that nothing handled, in a serving process', () => {
  it('an unhandled rejection: logged with its message only as a fingerprint and a length, counted, and the service goes on', async () => {
    const { d, httpPort } = await serve('reject');
    d.child.kill('SIGUSR2');
    await within(10_000, () => d.output().includes('unhandled promise rejection'), 'the log line');
    const line = logLine(d.output(), 'unhandled promise rejection');
    const message = `descriptor value ${SECRET}`;
    expect(line).toMatchObject({ level: 'error', kind: 'Error', messageLength: message.length, messageFingerprint: fingerprint(message) });
    expect(String(line.at)).toContain('stray-failure.cjs');
    expect(d.output()).not.toContain(SECRET);
    // Still serving, and the bug shows in the metrics.
    expect((await fetch(`http://127.0.0.1:${httpPort}/healthz`)).status).toBe(200);
    const metrics = await (await fetch(`http://127.0.0.1:${httpPort}/metrics`)).text();
    expect(metrics).toMatch(/^tollgate_unhandled_rejections_total 1$/m);
    d.child.kill('SIGUSR2');
    await within(10_000, async () => /^tollgate_unhandled_rejections_total 2$/m.test(await (await fetch(`http://127.0.0.1:${httpPort}/metrics`)).text()));
    d.child.kill('SIGTERM');
    expect(await bounded(d.exited, 10_000, 'exit after SIGTERM')).toBe(0);
  });

  it('an uncaught exception: one fatal line without the message, and exit code 1', async () => {
    const { d } = await serve('throw');
    d.child.kill('SIGUSR2');
    expect(await bounded(d.exited, 10_000, 'exit after the exception')).toBe(1);
    // 'exit' can come before the last output is read.
    await within(5000, () => d.output().includes('uncaught exception'), 'the fatal line');
    expect(logLine(d.output(), 'uncaught exception')).toMatchObject({ level: 'fatal', kind: 'Error' });
    expect(d.output()).not.toContain(SECRET);
  });
});
