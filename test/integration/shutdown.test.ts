import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort, startCli } from '../helpers/process.js';
import { type RedisServer, startRedis } from '../helpers/redis.js';
import { healthClient, property, RlsClient } from '../helpers/service.js';
import { unreadBytes } from '../helpers/sockets.js';
import { bounded, within } from '../helpers/time.js';

type Stream = { on: (event: string, fn: (arg: never) => void) => void };

// Calls are held in flight for real: Redis is frozen (SIGSTOP) while they wait on it.
describe('graceful shutdown', () => {
  let redis: RedisServer;
  beforeAll(async () => {
    redis = await startRedis();
  });
  afterAll(async () => {
    redis.signal('SIGCONT');
    await redis.stop();
  });

  it('on SIGTERM: NOT_SERVING, in-flight calls complete, then exit 0', async () => {
    const [grpcPort, httpPort] = [await freePort(), await freePort()];
    const daemon = await startCli(
      // No periodic tier refresh: while Redis is frozen, the only bytes sent to it are the calls' own.
      [
        'serve',
        '--grpc-port',
        String(grpcPort),
        '--http-port',
        String(httpPort),
        '--store',
        'redis',
        '--redis-url',
        redis.url,
        '--redis-timeout-ms',
        '5000',
        '--tier-refresh-ms',
        '600000',
      ],
      /tollgate serving/,
    );
    const rls = new RlsClient(grpcPort);
    const health = healthClient(grpcPort);
    try {
      expect((await rls.call(property('read', 'Bearer warm'))).overall_code).toBe('OK');
      const watched: number[] = [];
      const watch = (health as unknown as { Watch: (req: unknown) => Stream }).Watch({ service: 'envoy.service.ratelimit.v3.RateLimitService' });
      watch.on('data', (m: { status: number }) => watched.push(m.status));
      watch.on('error', () => undefined);
      const watchEnded = new Promise((r) => watch.on('end', r));
      // The watch is open (its first answer, SERVING, came): a busy machine could otherwise start it after SIGTERM.
      await within(5000, () => watched.includes(1));
      redis.signal('SIGSTOP');
      const inFlight = Array.from({ length: 10 }, (_, i) => rls.call(property('read', `Bearer inflight-${i}`), 10_000));
      // In flight: their counter script waits, unread, at the frozen Redis. (The client writes the ten in one
      // go, so the service reads them together: the first to reach Redis shows it holds them all.)
      await within(5000, () => unreadBytes(redis.port).some((n) => n > 0));
      daemon.child.kill('SIGTERM');
      // The signal was handled: NOT_SERVING (at once; the bound is for a test machine busy with other files).
      await within(15_000, () => watched.includes(2));
      expect(daemon.child.exitCode).toBeNull(); // still waiting for its calls
      redis.signal('SIGCONT');
      const answers = await bounded(Promise.all(inFlight), 10_000, 'the in-flight calls answered after SIGCONT');
      expect(answers.map((a) => a.overall_code)).toEqual(Array(10).fill('OK'));
      expect(await bounded(daemon.exited, 10_000, 'exit after the in-flight calls')).toBe(0);
      await bounded(watchEnded, 5000, 'the health watch ended');
      expect(watched).toEqual([1, 2]); // SERVING, then NOT_SERVING once the signal arrived
      expect(daemon.output()).toMatch(/"signal":"SIGTERM".*shutting down[\s\S]*tollgate stopped/);
    } finally {
      rls.close();
      health.close();
      daemon.child.kill('SIGKILL');
    }
  });

  it('on SIGTERM: a client trickling a request body in does not hold the process past the timeout', async () => {
    const [grpcPort, httpPort] = [await freePort(), await freePort()];
    const daemon = await startCli(
      ['serve', '--grpc-port', String(grpcPort), '--http-port', String(httpPort), '--shutdown-timeout-ms', '1000'],
      /tollgate serving/,
    );
    const sock = connect(httpPort, '127.0.0.1');
    sock.on('error', () => undefined);
    let trickle: NodeJS.Timeout | undefined;
    try {
      await bounded(new Promise((r) => sock.once('connect', r)), 5000, 'connect');
      sock.write('POST /json HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{');
      trickle = setInterval(() => sock.write(' '), 50);
      // The server has the request once it has read what was sent (and answers nothing): then ask it to stop.
      await within(5000, () => unreadBytes(httpPort, sock.localPort).includes(0));
      daemon.child.kill('SIGTERM');
      const closed = new Promise((r) => sock.once('close', r));
      // --shutdown-timeout-ms 1000: the bound is that, plus the process's own exit on a loaded machine.
      expect(await bounded(daemon.exited, 10_000, 'exit past the shutdown timeout')).toBe(0);
      await bounded(closed, 5000, 'the trickling socket closed');
      // Warnings and info lines may go to different streams: their order here is not the order written.
      expect(daemon.output()).toContain('did not finish in time');
      expect(daemon.output()).toContain('tollgate stopped');
    } finally {
      clearInterval(trickle);
      sock.destroy();
      daemon.child.kill('SIGKILL');
    }
  });
});
