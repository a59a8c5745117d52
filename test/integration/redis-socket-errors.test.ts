import { createServer, type Server, type Socket } from 'node:net';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClient, parseRedisUrl } from '../../src/store/redis-connection.js';
import { within } from '../helpers/time.js';

// A Redis whose TLS cannot be used (round 5, item 12: a clean CI run ended by ERR_SSL_TLSV1_ALERT_DECODE_ERROR in
// the Redis TLS test). ioredis listens for a connection's errors with once(): a second error on a socket whose
// listeners were spent had nobody to hear it, and ended the process. src/store/socket-errors.ts keeps one more.

describe('a Redis that answers the TLS handshake with an alert', () => {
  let server: Server;
  let port: number;
  const sockets: Socket[] = [];
  beforeAll(async () => {
    server = createServer((s) => {
      sockets.push(s);
      s.on('error', () => undefined);
      // A fatal decode_error alert for whatever the client says, then the connection torn down.
      s.once('data', () => {
        s.write(Buffer.from([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x32]));
        setTimeout(() => s.destroy(), 5);
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    port = (server.address() as { port: number }).port;
  });
  afterAll(() => {
    for (const s of sockets) s.destroy();
    server.close();
  });

  it('leaves no socket whose next error would go unheard', async () => {
    const client = createClient(parseRedisUrl(`rediss://127.0.0.1:${port}`, 'single'), { commandTimeoutMs: 25, sentinelPassword: undefined }) as Redis;
    const streams = new Set<NodeJS.EventEmitter>();
    const errors: string[] = [];
    client.on('error', (e: NodeJS.ErrnoException) => {
      errors.push(e.code ?? e.message);
      streams.add((client as unknown as { stream: NodeJS.EventEmitter }).stream);
    });
    try {
      await within(10_000, () => errors.length >= 2, 'two refused handshakes');
      expect(errors[0]).toBe('ERR_SSL_TLSV1_ALERT_DECODE_ERROR');
      // The sockets whose first error ioredis heard: one more error on each is heard too, not thrown.
      for (const s of streams) expect(() => s.emit('error', new Error('a second error on the same socket'))).not.toThrow();
    } finally {
      client.disconnect();
    }
  });
});
