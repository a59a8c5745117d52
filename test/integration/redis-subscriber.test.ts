import net from 'node:net';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createClient, parseRedisUrl } from '../../src/store/redis-connection.js';
import { subscriber } from '../../src/store/redis-subscriber.js';
import { within } from '../helpers/time.js';

/** Just enough of Redis for a subscriber: the ready check (INFO), SUBSCRIBE, +OK to the rest. While `dropAfterInfo`
 * is above 0, that many new connections are closed right after their ready check is answered: what a Redis that
 * goes away again during a reconnect looks like, the moment a resubscription fails. */
class FlakyRedis {
  readonly server = net.createServer((socket) => this.serve(socket));
  readonly sockets: net.Socket[] = [];
  subscribed = 0;
  subscriberSocket: net.Socket | undefined;
  dropAfterInfo = 0;
  /** That many SUBSCRIBEs are refused (as a master still loading its data, or an ACL, refuses one). */
  refuseSubscribe = 0;

  private serve(socket: net.Socket): void {
    this.sockets.push(socket);
    const drop = this.dropAfterInfo > 0;
    if (drop) this.dropAfterInfo--;
    let buf = '';
    socket.on('error', () => undefined);
    socket.on('data', (d) => {
      buf += d.toString('latin1');
      for (let cmd = takeCommand(); cmd; cmd = takeCommand()) {
        const name = cmd[0]!.toUpperCase();
        const sub = cmd[1]?.toUpperCase();
        if (name === 'CLUSTER' && sub === 'SLOTS') {
          // One master holding every slot: this server.
          const { port } = this.server.address() as net.AddressInfo;
          socket.write(`*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:${port}\r\n`);
        } else if (name === 'CLUSTER' && sub === 'INFO') {
          const body = 'cluster_state:ok\r\n';
          socket.write(`$${body.length}\r\n${body}\r\n`);
        } else if (name === 'SUBSCRIBE' && this.refuseSubscribe > 0) {
          this.refuseSubscribe--;
          socket.write('-LOADING Redis is loading the dataset in memory\r\n');
        } else if (name === 'INFO') {
          const body = '# Server\r\nloading:0\r\n';
          socket.write(`$${body.length}\r\n${body}\r\n`);
          if (drop) socket.destroy();
        } else if (name === 'SUBSCRIBE') {
          this.subscribed++;
          this.subscriberSocket = socket;
          socket.write(`*3\r\n$9\r\nsubscribe\r\n$${cmd[1]!.length}\r\n${cmd[1]}\r\n:1\r\n`);
        } else socket.write('+OK\r\n');
      }
    });
    // One command off the front of what came, as RESP arrays of bulk strings.
    const takeCommand = (): string[] | undefined => {
      const m = /^\*(\d+)\r\n/.exec(buf);
      if (!m) return undefined;
      let at = m[0].length;
      const args: string[] = [];
      for (let i = 0; i < Number(m[1]); i++) {
        const b = /^\$(\d+)\r\n/.exec(buf.slice(at));
        if (!b || buf.length < at + b[0].length + Number(b[1]) + 2) return undefined;
        at += b[0].length;
        args.push(buf.slice(at, at + Number(b[1])));
        at += Number(b[1]) + 2;
      }
      buf = buf.slice(at);
      return args;
    };
  }
}

describe('a subscriber whose Redis drops it', () => {
  let flaky: FlakyRedis;
  let port = 0;
  const unhandled: unknown[] = [];
  const onUnhandled = (reason: unknown): number => unhandled.push(reason);

  beforeEach(async () => {
    process.on('unhandledRejection', onUnhandled);
    flaky = new FlakyRedis();
    await new Promise<void>((r) => flaky.server.listen(0, '127.0.0.1', r));
    port = (flaky.server.address() as net.AddressInfo).port;
  });
  afterEach(async () => {
    process.off('unhandledRejection', onUnhandled);
    for (const s of flaky.sockets) s.destroy();
    await new Promise((r) => flaky.server.close(r));
  });

  /** A subscriber on the fake server, through the service's own client; `test` runs with it, then both close. */
  async function withSubscriber(type: 'single' | 'cluster', test: (failures: Error[]) => Promise<void>): Promise<void> {
    const client = createClient(parseRedisUrl(`redis://127.0.0.1:${port}`, type), { commandTimeoutMs: 25, sentinelPassword: undefined });
    client.on('error', () => undefined);
    const failures: Error[] = [];
    const sub = subscriber(
      client,
      'events',
      () => undefined,
      (err) => failures.push(err),
    );
    try {
      await test(failures);
      await new Promise((r) => setImmediate(r));
      expect(unhandled).toEqual([]);
    } finally {
      sub.disconnect();
      client.disconnect();
    }
  }

  it('subscribes again once it is back, and no failed SUBSCRIBE goes unhandled (which would end the process)', async () => {
    await withSubscriber('single', async (failures) => {
      await within(5000, () => flaky.subscribed === 1, 'the first subscription');
      flaky.dropAfterInfo = 1;
      flaky.subscriberSocket!.destroy(); // Redis goes away; the subscriber's next connection is dropped after its ready check
      await within(10_000, () => flaky.subscribed === 2, 'subscribed again on the connection after');
      expect(failures.length).toBeGreaterThanOrEqual(1); // the SUBSCRIBE on the dropped connection, told
    });
  });

  it('on a Cluster, a SUBSCRIBE refused is sent again while the Cluster is up (no new ready comes)', async () => {
    flaky.refuseSubscribe = 1;
    await withSubscriber('cluster', async (failures) => {
      await within(10_000, () => flaky.subscribed === 1, 'subscribed after the refused SUBSCRIBE');
      expect(failures.length).toBe(1);
    });
  });
});
