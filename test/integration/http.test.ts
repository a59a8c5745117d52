import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestService, type TestService } from '../helpers/service.js';

describe('HTTP port', () => {
  let t: TestService;
  let base: string;
  beforeAll(async () => {
    t = await startTestService();
    base = `http://127.0.0.1:${t.service.httpPort}`;
  });
  afterAll(async () => t.close());

  const post = (body: unknown) =>
    fetch(`${base}/json`, { method: 'POST', body: typeof body === 'string' ? body : JSON.stringify(body) });

  it('answers /healthz and /readyz', async () => {
    expect((await fetch(`${base}/healthz`)).status).toBe(200);
    const ready = await fetch(`${base}/readyz`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toEqual({ status: 'ready' });
  });

  it('POST /json decides like gRPC: 200, then 429 with the JSON response', async () => {
    const req = {
      domain: 'property-api',
      descriptors: [{ entries: [{ key: 'category', value: 'reports' }, { key: 'token', value: 'Bearer json-client' }] }],
    };
    const first = await post(req);
    expect(first.status).toBe(200);
    const body = await first.json();
    expect(body.overallCode).toBe('OK');
    expect(body.statuses[0]).toMatchObject({ code: 'OK', currentLimit: { name: 'reports-per-second', requestsPerUnit: 2, unit: 'SECOND' }, limitRemaining: 1 });
    expect(body.responseHeadersToAdd).toContainEqual({ key: 'X-RateLimit-Limit', value: '200' });
    await post(req);
    const third = await post({ ...req, hitsAddend: 1 });
    expect(third.status).toBe(429);
    const over = await third.json();
    expect(over.overallCode).toBe('OVER_LIMIT');
    expect(JSON.parse(Buffer.from(over.rawBody, 'base64').toString())).toMatchObject({ status: 429 });
  });

  it('POST /json with bad input is a 400 naming the problem', async () => {
    const empty = await post({ domain: 'property-api', descriptors: [] });
    expect(empty.status).toBe(400);
    expect((await empty.json()).error).toMatch(/no descriptors/);
    const notJson = await post('{nope');
    expect(notJson.status).toBe(400);
    expect((await notJson.json()).error).toMatch(/not valid JSON/);
    expect((await fetch(`${base}/json`)).status).toBe(405);
  });
});
