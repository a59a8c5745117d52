import { Agent, request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jsonOf } from '../helpers/json.js';
import { capturingLogger, startTestService, type TestService } from '../helpers/service.js';

const JSON_TYPE = { 'content-type': 'application/json' };

describe('HTTP port', () => {
  let t: TestService;
  let base: string;
  beforeAll(async () => {
    t = await startTestService();
    base = `http://127.0.0.1:${t.service.httpPort}`;
  });
  afterAll(async () => t.close());

  const post = (body: unknown, headers: Record<string, string> = JSON_TYPE) =>
    fetch(`${base}/json`, { method: 'POST', headers, body: typeof body === 'string' || body instanceof Blob ? body : JSON.stringify(body) });

  it('answers /healthz and /readyz', async () => {
    expect((await fetch(`${base}/healthz`)).status).toBe(200);
    const ready = await fetch(`${base}/readyz`);
    expect(ready.status).toBe(200);
    expect(await jsonOf(ready)).toEqual({ status: 'ready' });
  });

  it('POST /json decides like gRPC: 200, then 429 with the JSON response', async () => {
    const req = {
      domain: 'property-api',
      descriptors: [
        {
          entries: [
            { key: 'category', value: 'reports' },
            { key: 'token', value: 'Bearer json-client' },
          ],
        },
      ],
    };
    const first = await post(req);
    expect(first.status).toBe(200);
    const body = await jsonOf(first);
    expect(body.overallCode).toBe('OK');
    expect(body.statuses[0]).toMatchObject({ code: 'OK', currentLimit: { name: 'reports-per-second', requestsPerUnit: 2, unit: 'SECOND' }, limitRemaining: 1 });
    expect(body.responseHeadersToAdd).toContainEqual({ key: 'X-RateLimit-Limit', value: '200' });
    await post(req);
    const third = await post({ ...req, hitsAddend: 1 });
    expect(third.status).toBe(429);
    const over = await jsonOf(third);
    expect(over.overallCode).toBe('OVER_LIMIT');
    expect(JSON.parse(Buffer.from(over.rawBody, 'base64').toString())).toMatchObject({ status: 429 });
  });

  it('POST /json with bad input is a 400 naming the problem', async () => {
    const empty = await post({ domain: 'property-api', descriptors: [] });
    expect(empty.status).toBe(400);
    expect((await jsonOf(empty)).error).toMatch(/no descriptors/);
    const notJson = await post('{nope');
    expect(notJson.status).toBe(400);
    expect((await jsonOf(notJson)).error).toMatch(/not valid JSON/);
    expect((await fetch(`${base}/json`)).status).toBe(405);
  });

  const entries = [
    { key: 'category', value: 'write' },
    { key: 'token', value: 'Bearer numbers' },
  ];
  const numbers: [string, Record<string, unknown>, RegExp][] = [
    ['hits_addend past uint32', { hits_addend: 4294967296 }, /^hits_addend must be a whole number from 0 to 4294967295$/],
    [
      'requestsPerUnit 1e300',
      { descriptors: [{ entries, limit: { requestsPerUnit: 1e300, unit: 'SECOND' } }] },
      /descriptors\[0\]\.limit\.requests_per_unit must be a whole number/,
    ],
    ['a hex string', { hitsAddend: '0x10' }, /hits_addend must be a whole number/],
    ['a fraction', { hitsAddend: 1.5 }, /hits_addend must be a whole number/],
    ['a negative number', { descriptors: [{ entries, hitsAddend: -1 }] }, /descriptors\[0\]\.hits_addend must be a whole number/],
    ['a padded string', { hitsAddend: ' 7' }, /hits_addend must be a whole number/],
  ];

  it.each(numbers)('numbers outside uint32 or not plain integers are a 400: %s', async (_name, fields, message) => {
    const res = await post({ domain: 'property-api', descriptors: [{ entries }], ...fields });
    expect(res.status).toBe(400);
    expect((await jsonOf(res)).error).toMatch(message);
  });

  it('a decimal string is a number, as protobuf JSON allows', async () => {
    const res = await post({ domain: 'property-api', descriptors: [{ entries: [{ key: 'category', value: 'read' }] }], hitsAddend: '2' });
    expect(res.status).toBe(200);
  });

  it('POST /json without a content-type header answers 200 with a decision, as envoyproxy/ratelimit does', async () => {
    // envoyproxy/ratelimit's /json handler (src/server/server_impl.go, NewJsonHandler) reads the body with
    // protojson whatever the headers say; `curl --data-binary @req.json` from a script without -H sends none.
    const req = JSON.stringify({
      domain: 'property-api',
      descriptors: [
        {
          entries: [
            { key: 'category', value: 'read' },
            { key: 'token', value: 'Bearer no-content-type' },
          ],
        },
      ],
    });
    const bare = await new Promise<{ status: number; headers: Record<string, unknown>; body: string }>((resolve, reject) => {
      const r = request(`${base}/json`, { method: 'POST', headers: { 'content-length': Buffer.byteLength(req) } }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (body += d));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
      });
      r.on('error', reject);
      r.end(req);
    });
    expect(bare.status).toBe(200);
    expect(bare.headers['content-type']).toBe('application/json');
    const decision = JSON.parse(bare.body) as { overallCode: string; statuses: { code: string }[] };
    expect(decision.overallCode).toBe('OK');
    expect(decision.statuses).toHaveLength(1);
    expect(decision.statuses[0]!.code).toBe('OK');
  });

  it('/json reads its body as JSON whatever the content type, as envoyproxy/ratelimit does; /explain still asks for JSON (415)', async () => {
    const req = JSON.stringify({ domain: 'property-api', descriptors: [{ entries: [{ key: 'category', value: 'read' }] }] });
    // What `curl --data @req.json` sends (envoyproxy/ratelimit's own example), and others.
    for (const type of ['application/x-www-form-urlencoded', 'text/plain', 'application/jsonp', 'Application/JSON; charset=utf-8']) {
      const res = await post(req, { 'content-type': type });
      expect(res.status).toBe(200);
      expect((await jsonOf(res)).overallCode).toBe('OK');
    }
    // Whatever the type, a body that is not JSON is still a 400.
    expect((await post('domain=property-api', { 'content-type': 'application/x-www-form-urlencoded' })).status).toBe(400);
    const explain = await fetch(`${base}/explain`, { method: 'POST', headers: { 'content-type': 'text/plain' }, body: req });
    expect(explain.status).toBe(415);
    const explainBare = await fetch(`${base}/explain`, { method: 'POST', body: new Blob([req]) });
    expect(explainBare.status).toBe(415);
  });

  it('a body that is not UTF-8, or holds a lone surrogate, is a 400', async () => {
    const bytes = Buffer.concat([
      Buffer.from('{"domain":"property-api","descriptors":[{"entries":[{"key":"token","value":"s3cr3t'),
      Buffer.from([0xff]),
      Buffer.from('"}]}]}'),
    ]);
    const bad = await post(new Blob([new Uint8Array(bytes)]));
    expect(bad.status).toBe(400);
    expect((await jsonOf(bad)).error).toBe('body is not valid UTF-8');
    const lone = await post('{"domain":"property-api","descriptors":[{"entries":[{"key":"token","value":"s3cr3t\\ud800"}]}]}');
    expect(lone.status).toBe(400);
    expect((await jsonOf(lone)).error).toMatch(/descriptors\[0\]\.entries\[0\]\.value is not valid Unicode/);
  });

  it('a body over 1 MiB is a 413, answered before the whole body is read', async () => {
    const status = await new Promise<number>((resolve, reject) => {
      const req = request(`${base}/json`, { method: 'POST', headers: { ...JSON_TYPE, 'transfer-encoding': 'chunked' } }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on('error', reject);
      req.write(Buffer.alloc(2 * 1024 * 1024, 0x20));
      // No end(): the server answers without waiting for it.
    });
    expect(status).toBe(413);
  });

  it('a refused body is read to its end: the client may finish sending it, and the connection stays usable', async () => {
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const total = 2 * 1024 * 1024;
    const first = Buffer.alloc(1024 * 1024 + 100, 0x20);
    try {
      // Half the body, then the answer, then the rest: a server that closed after answering resets this.
      const refused = await new Promise<{ status: number; sent: Promise<void> }>((resolve, reject) => {
        const req = request(`${base}/json`, { method: 'POST', agent, headers: { ...JSON_TYPE, 'content-length': total } }, (res) => {
          res.resume();
          res.on('end', () =>
            resolve({ status: res.statusCode ?? 0, sent: new Promise((done, _fail) => req.end(Buffer.alloc(total - first.length, 0x20), () => done())) }),
          );
        });
        req.on('error', reject);
        req.write(first);
      });
      expect(refused.status).toBe(413);
      await refused.sent;
      const next = await new Promise<{ status: number; reused: boolean }>((resolve, reject) => {
        const req = request(`${base}/json`, { method: 'POST', agent, headers: JSON_TYPE }, (res) => {
          res.resume();
          res.on('end', () => resolve({ status: res.statusCode ?? 0, reused: req.reusedSocket }));
        });
        req.on('error', reject);
        req.end('{"domain":"property-api","descriptors":[{"entries":[{"key":"category","value":"read"}]}]}');
      });
      expect(next).toEqual({ status: 200, reused: true });
    } finally {
      agent.destroy();
    }
  }, 5000);
});

describe('admin API paths', () => {
  let t: TestService;
  const log = capturingLogger('trace');
  const ADMIN = 'admin-http-test';
  beforeAll(async () => {
    t = await startTestService({ env: { TOLLGATE_ADMIN_TOKEN: ADMIN }, logger: log.logger });
  });
  afterAll(async () => t.close());

  it('a malformed percent-escape is a 400, and the path is not logged', async () => {
    const res = await fetch(`http://127.0.0.1:${t.service.adminPort}/admin/tiers/s3cr3t%E0%A4%A`, {
      method: 'DELETE',
      headers: { authorization: `Bearer ${ADMIN}` },
    });
    expect(res.status).toBe(400);
    expect((await jsonOf(res)).error).toMatch(/malformed percent-escape/);
    expect(JSON.stringify(log.lines())).not.toContain('s3cr3t');
  });
});
