import http2 from 'node:http2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_RLS_MESSAGE_BYTES } from '../../src/server/port-bounds.js';
import { startTestService, type TestService } from '../helpers/service.js';
import { bounded } from '../helpers/time.js';
import { frame, METHOD_PATH } from './grpc-cases.js';

/** Issue 22, item 3: a 4 MB message of two million empty descriptors was decoded whole (~700 ms and +216 MB)
 * before the 64-descriptor check refused it. It is now refused at the 65th. Measured as the process's CPU
 * time and resident memory around the call (the service runs in this process), not as wall time. */

function call(port: number, body: Buffer): Promise<{ status: number; message: string }> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`http://127.0.0.1:${port}`);
    session.on('error', reject);
    const stream = session.request({ ':method': 'POST', ':path': METHOD_PATH, 'content-type': 'application/grpc', te: 'trailers' });
    let head: http2.IncomingHttpHeaders = {};
    stream.on('response', (h) => (head = h));
    stream.on('trailers', (t) => (head = { ...head, ...t }));
    stream.on('data', () => undefined);
    stream.on('close', () => {
      session.close();
      resolve({ status: Number(head['grpc-status']), message: decodeURIComponent(String(head['grpc-message'] ?? '')) });
    });
    stream.end(body);
  });
}

describe('a message of 120,000 empty descriptors', () => {
  let t: TestService;
  beforeAll(async () => {
    t = await startTestService();
  });
  afterAll(async () => t?.close());

  it('is refused at the 65th descriptor: INVALID_ARGUMENT, little CPU, little memory', async () => {
    // 240 KB, under the 256 KiB receive limit (port-bounds.ts), so it reaches the decoder: the two million that
    // once tested this (4 MB) are now refused before it, RESOURCE_EXHAUSTED.
    const message = Buffer.alloc(2 + 2 * 120_000);
    message.set([0x0a, 0]);
    for (let i = 2; i < message.length; i += 2) message.set([0x12, 0], i);
    const body = frame(message);
    expect(body.length).toBeLessThan(MAX_RLS_MESSAGE_BYTES);
    global.gc?.();
    const rss = process.memoryUsage().rss;
    const cpu = process.cpuUsage();
    const answer = await bounded(call(t.service.grpcPort, body), 10_000, 'the answer');
    const used = process.cpuUsage(cpu);
    const cpuMs = (used.user + used.system) / 1000;
    const grownMb = (process.memoryUsage().rss - rss) / 2 ** 20;
    expect(answer).toEqual({ status: 3, message: 'descriptors[64]: more than the maximum of 64 descriptors' });
    // Sending and receiving 4 MB over loopback in this process is most of this; decoding the whole message
    // took ~700 ms of CPU and 216 MB before.
    expect(cpuMs).toBeLessThan(200);
    expect(grownMb).toBeLessThan(20);
    console.log(`120,000 descriptors refused: ${cpuMs.toFixed(1)} ms CPU (client and server), RSS +${grownMb.toFixed(1)} MB`);
  });
});
