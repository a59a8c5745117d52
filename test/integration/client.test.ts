import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createClient, Pacer, parseRetryAfter } from '../../src/client/index.js';

// A real HTTP server that answers from a script: each request takes the next scripted response.
interface Scripted {
  status: number;
  headers?: Record<string, string>;
}

let server: Server;
let base: string;
let script: Scripted[] = [];
let seen: { method: string; body: string }[] = [];

beforeAll(async () => {
  server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c));
    req.on('end', () => {
      seen.push({ method: req.method!, body });
      const next = script.shift() ?? { status: 200 };
      res.writeHead(next.status, { 'content-type': 'application/json', ...next.headers });
      res.end(JSON.stringify({ status: next.status }));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((r) => server.close(() => r())));
beforeEach(() => {
  script = [];
  seen = [];
});

/** A fake clock: sleeping records the wait and returns at once. */
function fakeTime() {
  const waits: number[] = [];
  const sleep = (ms: number): Promise<void> => {
    waits.push(ms);
    return Promise.resolve();
  };
  return { waits, sleep, random: () => 0 };
}

const tooMany = (headers: Record<string, string> = {}): Scripted => ({
  status: 429,
  headers: { 'x-ratelimit-limit': '1000', 'x-ratelimit-remaining': '990', ...headers },
});

describe('tollgate/client', () => {
  it('waits as long as Retry-After says, then returns the success', async () => {
    script = [tooMany({ 'retry-after': '3' }), { status: 200 }];
    const t = fakeTime();
    const res = await createClient(t).fetch(`${base}/invoices`);
    expect(res.status).toBe(200);
    expect(t.waits).toEqual([3000]);
    expect(seen).toHaveLength(2);
  });

  it('reads Retry-After as an HTTP date too', () => {
    const now = Date.UTC(2026, 10, 21, 10, 0, 0);
    expect(parseRetryAfter('Sat, 21 Nov 2026 10:00:07 GMT', now)).toBe(7000);
    expect(parseRetryAfter('soon', now)).toBeUndefined();
  });

  it('without Retry-After: backs off 1, 2, 4, 8, 16 s, then gives up with the last 429', async () => {
    script = Array.from({ length: 10 }, () => tooMany());
    const t = fakeTime();
    const res = await createClient(t).fetch(`${base}/invoices`);
    expect(res.status).toBe(429);
    expect(t.waits).toEqual([1000, 2000, 4000, 8000, 16000]);
    expect(seen).toHaveLength(6);
  });

  it('adds jitter on top of the schedule, and the retry count is configurable', async () => {
    script = Array.from({ length: 10 }, () => tooMany());
    const t = { ...fakeTime(), random: () => 0.5 };
    await createClient({ ...t, maxRetries: 2, jitter: 0.2 }).fetch(`${base}/modules`);
    expect(t.waits).toEqual([1100, 2200]);
    expect(seen).toHaveLength(3);
  });

  it('does not retry POST unless told to; when told, sends the same body again', async () => {
    script = [tooMany({ 'retry-after': '1' }), { status: 201 }];
    const t = fakeTime();
    const once = await createClient(t).fetch(`${base}/invoices`, { method: 'POST', body: '{"amount":10}' });
    expect(once.status).toBe(429);
    expect(seen).toHaveLength(1);

    script = [tooMany({ 'retry-after': '1' }), { status: 201 }];
    seen = [];
    const retried = await createClient({ ...t, retryNonIdempotent: true }).fetch(`${base}/invoices`, { method: 'POST', body: '{"amount":10}' });
    expect(retried.status).toBe(201);
    expect(seen.map((s) => [s.method, s.body])).toEqual([
      ['POST', '{"amount":10}'],
      ['POST', '{"amount":10}'],
    ]);
  });

  it('does not wait for a Retry-After beyond maxRetryAfterMs', async () => {
    script = [tooMany({ 'retry-after': '3600' }), { status: 200 }];
    const t = fakeTime();
    const res = await createClient(t).fetch(`${base}/reports/monthly`);
    expect(res.status).toBe(429);
    expect(t.waits).toEqual([]);
  });

  it('an abort during the wait ends the call at once', async () => {
    script = [tooMany({ 'retry-after': '30' }), { status: 200 }];
    const controller = new AbortController();
    const started = Date.now();
    setTimeout(() => controller.abort(), 50);
    await expect(createClient().fetch(`${base}/invoices`, { signal: controller.signal })).rejects.toMatchObject({ name: 'AbortError' });
    expect(Date.now() - started).toBeLessThan(5000);
    expect(seen).toHaveLength(1);
  });

  it('exposes the last X-RateLimit values', async () => {
    script = [{ status: 200, headers: { 'x-ratelimit-limit': '1000', 'x-ratelimit-remaining': '998', 'x-ratelimit-reset': '1795255200' } }];
    const client = createClient(fakeTime());
    expect(client.rateLimit).toBeUndefined();
    await client.fetch(`${base}/invoices`);
    expect(client.rateLimit).toEqual({ status: 200, limit: 1000, remaining: 998, resetAt: 1795255200, retryAfterMs: undefined });
  });

  it('the pacer spaces requests to stay under a rate', async () => {
    let now = 0;
    const waits: number[] = [];
    const pacer = new Pacer({
      perSecond: 10,
      now: () => now,
      sleep: async (ms) => {
        waits.push(ms);
        now += ms;
      },
    });
    const client = createClient({ pacer, sleep: async () => undefined });
    for (let i = 0; i < 4; i++) await client.fetch(`${base}/modules`);
    expect(waits).toEqual([100, 100, 100]);
    expect(seen).toHaveLength(4);
    now += 10_000; // after a quiet spell, one goes at once again
    await client.fetch(`${base}/modules`);
    expect(waits).toHaveLength(3);
  });

  it('is published as the tollgate/client entry point', async () => {
    const mod = await import('tollgate/client');
    expect(typeof mod.createClient).toBe('function');
    expect(typeof mod.Pacer).toBe('function');
  });
});
