/** The HTTP port under attack: POST /json and /explain with every shape of JSON and body, the admin API
 * with every shape of path and credential, and raw bytes that are barely HTTP. Each case lists the
 * statuses docs/operations.md allows; the executors check the answer and scan headers and body for the marker. */
import { Agent, request } from 'node:http';
import { connect } from 'node:net';
import type { RequestBounds } from '../../src/rls/request.js';
import type { RlsRequest } from '../helpers/service.js';
import { ADMIN_TOKEN, KNOWN_TIERS, type LeakScanner, type Outcome, type Rng } from './fuzz-lib.js';
import { contractAccepts, invalidRequest, validRequest } from './request-cases.js';

const DEADLINE_MS = 10_000;
const MAX_BODY = 1024 * 1024;
const JSON_TYPE = 'application/json';

export interface HttpCase {
  kind: string;
  /** Absent: `raw` bytes are written to a socket as they are. */
  method?: string;
  path?: string;
  headers?: Record<string, string>;
  body?: Buffer;
  raw?: Buffer;
  /** Sent to the admin port instead of the HTTP port. */
  admin?: boolean;
  /** Allowed HTTP statuses; 0: the server closed the connection without an answer. */
  allowed: number[];
}

// ---------------------------------------------------------------- JSON bodies

const UNIT_NAMES = ['UNKNOWN', 'SECOND', 'MINUTE', 'HOUR', 'DAY', 'MONTH', 'YEAR', 'WEEK'];

/** The request as protobuf JSON, in either naming, numbers sometimes as decimal strings, units as names. */
function toJson(r: Rng, req: RlsRequest): Record<string, unknown> {
  const camel = r.chance(0.5);
  const k = (snake: string): string => (camel ? snake.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase()) : snake);
  const num = (n: number): number | string => (r.chance(0.2) ? String(n) : n);
  const unit = (u: number | string): number | string => (typeof u === 'number' && r.chance(0.5) ? (UNIT_NAMES[u] ?? u) : u);
  return {
    domain: req.domain,
    descriptors: req.descriptors.map((d) => ({
      entries: d.entries,
      ...(d.limit && { limit: { [k('requests_per_unit')]: num(d.limit.requests_per_unit), unit: unit(d.limit.unit) } }),
      ...(d.hits_addend && { [k('hits_addend')]: r.chance(0.5) ? { value: num(d.hits_addend.value) } : num(d.hits_addend.value) }),
    })),
    [k('hits_addend')]: num(req.hits_addend ?? 0),
  };
}

/** Values of the wrong type, numbers protobuf JSON does not allow, strings with lone surrogates. */
function brokenJson(r: Rng, marker: string, bounds: RequestBounds): { kind: string; body: string } {
  const req = toJson(r, validRequest(r, marker, bounds));
  const d = (req.descriptors as Record<string, unknown>[])[0]!;
  const entries = d.entries as Record<string, unknown>[];
  const wrong = r.pick<unknown>([5, true, [marker], { k: marker }, -1, 1e300, marker]);
  const badNumber = r.pick<unknown>(['0x10', 1e300, 4294967296, -1, 1.5, ' 7', '1e3', '', true, [], '+5', '007', '9999999999', { value: marker }]);
  const breakers: [string, () => void][] = [
    ['domain of the wrong type', () => (req.domain = r.pick([5, [marker], { marker }, true]))],
    ['descriptors of the wrong type', () => (req.descriptors = r.pick([{ marker }, marker, 7]))],
    ['descriptor of the wrong type', () => ((req.descriptors as unknown[])[0] = r.pick([marker, 3, null, [marker]]))],
    ['entries of the wrong type', () => (d.entries = r.pick([{ key: marker }, marker]))],
    ['entry of the wrong type', () => ((entries as unknown[])[0] = r.pick<unknown>([marker, 9, [marker], null]))],
    ['key or value of the wrong type', () => (entries[0]![r.pick(['key', 'value'])] = typeof wrong === 'string' ? 5 : wrong)],
    ['limit of the wrong type', () => (d.limit = r.pick([marker, 5, [1], true]))],
    [
      'a bad number',
      () => {
        delete req.hits_addend;
        delete req.hitsAddend;
        req[r.pick(['hits_addend', 'hitsAddend'])] = badNumber;
      },
    ],
    ['a bad limit number', () => (d.limit = { requestsPerUnit: badNumber, unit: 'SECOND' })],
    ['a bad unit', () => (d.limit = { requestsPerUnit: 1, unit: r.pick([marker, 'WEEK', 'UNKNOWN', -1, 2 ** 33, 1.5]) })],
  ];
  const [kind, apply] = r.pick(breakers);
  apply();
  return { kind, body: JSON.stringify(req) };
}

function loneSurrogate(r: Rng, marker: string): string {
  const bad = r.pick(['\\ud800', '\\udfff', '\\udc00\\ud800']);
  const where = r.pick(['domain', 'key', 'value']);
  const s = (field: string, text: string): string => (field === where ? `${marker}${bad}` : text);
  return `{"domain":"${s('domain', 'property-api')}","descriptors":[{"entries":[{"key":"${s('key', 'token')}","value":"${s('value', marker)}"}]}]}`;
}

/** Any JSON value, keys drawn from the request's own names so some shapes get deep into the parser. */
function randomJson(r: Rng, marker: string, depth: number): unknown {
  const keys = [
    'domain',
    'descriptors',
    'entries',
    'key',
    'value',
    'limit',
    'unit',
    'requestsPerUnit',
    'requests_per_unit',
    'hitsAddend',
    'hits_addend',
    marker,
  ];
  switch (depth > 4 ? r.int(4) : r.int(6)) {
    case 0:
      return r.pick([null, true, false]);
    case 1:
      return r.pick([0, -1, 1.5, 2 ** 32, 2 ** 53 + 2, 1e308, -0, r.int(100)]);
    case 2:
    case 3:
      return r.pick([marker, 'property-api', 'read', 'token', `Bearer ${marker}`, '']);
    case 4:
      return Array.from({ length: r.int(4) }, () => randomJson(r, marker, depth + 1));
    default:
      return Object.fromEntries(Array.from({ length: r.int(5) }, () => [r.pick(keys), randomJson(r, marker, depth + 1)]));
  }
}

// ---------------------------------------------------------------- cases

/** One case: /json and /explain most of the time, then the admin API, other paths, raw bytes. */
export function httpCase(r: Rng, index: number, marker: string, bounds: RequestBounds): HttpCase {
  const roll = r.int(100);
  if (roll < 60) return jsonCase(r, index, marker, bounds);
  if (roll < 85) return adminCase(r, marker);
  if (roll < 93) return pathCase(r, marker);
  return rawCase(r, marker);
}

function jsonCase(r: Rng, index: number, marker: string, bounds: RequestBounds): HttpCase {
  const path = r.pick(['/json', '/json', '/explain']);
  const decided = path === '/json' ? [200, 429] : [200];
  const post = (kind: string, body: string | Buffer, allowed: number[], type = JSON_TYPE): HttpCase => ({
    kind: `${path} ${kind}`,
    method: 'POST',
    path,
    headers: type ? { 'content-type': type } : {},
    body: Buffer.from(body),
    allowed,
  });
  // Bodies of a megabyte only on a few fixed indices: they cost.
  if (index % 60 === 11) return post('body over 1 MiB', `{"domain":"${marker}${'x'.repeat(MAX_BODY)}"}`, [413]);
  if (index % 60 === 41) return post('body just under 1 MiB', `{"domain":"${marker}${'y'.repeat(MAX_BODY - 200)}"}`, [400]);
  switch (r.int(12)) {
    case 0:
    case 1:
    case 2: {
      const req = r.chance(0.6) ? validRequest(r, marker, bounds) : invalidRequest(r, marker, bounds).request;
      const ok = contractAccepts(req, bounds) && !hasLongHits(req);
      return post(ok ? 'valid request' : 'invalid request', JSON.stringify(toJson(r, req)), ok ? decided : [400]);
    }
    case 3:
    case 4: {
      const broken = brokenJson(r, marker, bounds);
      return post(broken.kind, broken.body, [400]);
    }
    case 5:
      return post('random JSON', JSON.stringify(randomJson(r, marker, 0)) ?? 'null', [...decided, 400]);
    case 6: {
      // Up to about 800 KB: deep, but under the body bound.
      const arrays = r.chance(0.5);
      const n = r.pick(arrays ? [1000, 100_000, 400_000] : [1000, 50_000, 130_000]);
      const nest = arrays ? `${'['.repeat(n)}"${marker}"${']'.repeat(n)}` : `${'{"a":'.repeat(n)}"${marker}"${'}'.repeat(n)}`;
      return post('deep nesting', `{"domain":${nest}}`, [400]);
    }
    case 7:
      // /json reads any content type as envoyproxy/ratelimit does (a decision); /explain asks for JSON.
      return post(
        'content type',
        JSON.stringify(toJson(r, validRequest(r, marker, bounds))),
        path === '/json' ? decided : [415],
        r.pick(['', 'text/plain', 'application/x-www-form-urlencoded', 'application/jsonp', `application/${marker}`, 'multipart/form-data; boundary=x']),
      );
    case 8:
      return post(
        'invalid UTF-8',
        Buffer.concat([Buffer.from(`{"domain":"${marker}`), Buffer.from(r.pick([[0xff], [0xc0, 0xaf], [0xed, 0xa0, 0x80]])), Buffer.from('"}')]),
        [400],
      );
    case 9:
      return post('lone surrogate', loneSurrogate(r, marker), [400]);
    case 10:
      return post('not JSON', r.pick(['', '{', `{"domain":"${marker}"`, `${marker}`, '{"a":1}{}', '\u0000']), [400]);
    default:
      return { kind: `${path} wrong method`, method: r.pick(['GET', 'PUT', 'DELETE', 'PATCH']), path, headers: { 'content-type': JSON_TYPE }, allowed: [405] };
  }
}

/** A descriptor hits_addend past uint32 is refused by /json before the contract's own check. */
function hasLongHits(req: RlsRequest): boolean {
  return req.descriptors.some((d) => d.hits_addend !== undefined && d.hits_addend.value > 2 ** 32 - 1);
}

const FINGERPRINT = 'ba7816bf8f01cfea414140de5dae2223';

function pathSegment(r: Rng, marker: string): { segment: string; wellFormed: boolean } {
  const options: [string, boolean][] = [
    [FINGERPRINT, true],
    [`${FINGERPRINT}${FINGERPRINT}`, true],
    [marker, true],
    [`${marker}%ZZ`, false],
    [`${marker}%E0%A4%A`, false],
    [`%${marker}`, false],
    [`${marker}%`, false],
    [encodeURIComponent(`Bearer ${marker} é😀`), true],
    [[...Buffer.from(marker)].map((b) => `%${b.toString(16)}`).join(''), true],
    [`${marker}%2F..%2F%00`, true],
  ];
  const [segment, wellFormed] = r.pick(options);
  return { segment, wellFormed };
}

function adminCase(r: Rng, marker: string): HttpCase {
  const { segment } = pathSegment(r, marker);
  const path = r.pick([
    `/admin/tiers/${segment}`,
    `/admin/tokens/${segment}`,
    `/admin/tokens/${segment}/counters`,
    '/admin/tiers',
    `/admin/${segment}`,
    '/admin',
  ]);
  const method = r.pick(['GET', 'PUT', 'DELETE', 'POST', 'PATCH']);
  const auth = r.pick([
    `Bearer ${ADMIN_TOKEN}`,
    `Bearer ${ADMIN_TOKEN}`,
    `Bearer ${ADMIN_TOKEN}`,
    '',
    `Bearer ${marker}`,
    `Basic ${marker}`,
    `Bearer  ${ADMIN_TOKEN}`,
  ]);
  const headers: Record<string, string> = auth ? { authorization: auth } : {};
  let body: Buffer | undefined;
  if (method === 'PUT' || method === 'POST') {
    headers['content-type'] = r.pick([JSON_TYPE, JSON_TYPE, 'text/plain']);
    body = Buffer.from(
      r.pick([`{"tier":"${r.pick(KNOWN_TIERS)}"}`, `{"tier":"${marker}-${r.int(100)}"}`, '{"tier":5}', `{"${marker}":1}`, '{', `"${marker}"`]),
    );
  }
  const authorized = auth === `Bearer ${ADMIN_TOKEN}`;
  return {
    kind: `admin ${authorized ? 'authorized' : 'unauthorized'} ${method}`,
    admin: true,
    method,
    path,
    headers,
    body,
    allowed: authorized ? [200, 400, 404, 415] : [401],
  };
}

function pathCase(r: Rng, marker: string): HttpCase {
  const { segment } = pathSegment(r, marker);
  const path = r.pick([
    `/${segment}`,
    `/json/${segment}`,
    `/explain${segment}`,
    `/metrics/${segment}`,
    `/healthz?${segment}`,
    `/readyz?x=${segment}`,
    `//${segment}`,
  ]);
  const method = r.pick(['GET', 'POST', 'HEAD', 'OPTIONS', 'DELETE']);
  const known = (path.startsWith('/healthz?') || path.startsWith('/readyz?')) && method === 'GET';
  return { kind: `path ${method}`, method, path, headers: { 'x-token': marker, cookie: `session=${marker}` }, allowed: known ? [200] : [404, 405] };
}

/** Bytes that are barely HTTP/1.1: Node's parser answers 400 or 431 (or closes); nothing may be 5xx. */
function rawCase(r: Rng, marker: string): HttpCase {
  const requests = [
    `GET /${marker} HTTP/1.1\r\nHost: ${marker}\r\nConnection: close\r\n\r\n`,
    `POST /json HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: -1\r\nConnection: close\r\n\r\n{"domain":"${marker}"}`,
    `POST /json HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\nzz\r\n${marker}\r\n0\r\n\r\n`,
    `POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n${marker}`,
    `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${marker}${'a'.repeat(20_000)}\r\nConnection: close\r\n\r\n`,
    `G\u0000T /${marker} HTTP/1.1\r\n\r\n`,
    `GET /${marker} HTTP/9.9\r\nConnection: close\r\n\r\n`,
    `${marker}\r\n\r\n`,
    `GET /admin/tiers HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${marker}\r\nAuthorization: Bearer ${ADMIN_TOKEN}\r\nConnection: close\r\n\r\n`,
  ];
  const pick = r.int(requests.length);
  // A /-path GET is a 404; of duplicated Authorization headers Node keeps the first (the marker's): 401.
  const allowed = pick === 0 ? [404] : pick === 8 ? [401] : [400, 404, 413, 431, 505, 0];
  return { kind: `raw bytes #${pick}`, raw: Buffer.from(requests[pick]!, 'latin1'), admin: pick === 8, allowed };
}

// ---------------------------------------------------------------- executors

export const httpAgent = (): Agent => new Agent({ keepAlive: true, maxSockets: 16 });

export function execHttp(agent: Agent, port: number, c: HttpCase, index: number, scanner: LeakScanner): Promise<Outcome> {
  if (c.raw) return execRawHttp(port, c, index, scanner);
  return new Promise((resolve) => {
    const req = request({ host: '127.0.0.1', port, method: c.method, path: c.path, headers: c.headers, agent, timeout: DEADLINE_MS }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (d: Buffer) => chunks.push(d));
      res.on('error', () => resolve({ wrong: `the answer (${res.statusCode}) broke off` }));
      res.on('end', () => resolve(judgeHttp(res.statusCode ?? 0, JSON.stringify(res.headers), Buffer.concat(chunks).toString('utf8'), c, index, scanner)));
    });
    req.on('timeout', () => {
      req.destroy();
      resolve('hang');
    });
    // A server that answers early (413) and closes while the body is still going out: the answer counts.
    req.on('error', (err) => resolve(c.allowed.includes(0) ? 'ok' : { wrong: `request failed: ${err.message}` }));
    req.end(c.body);
  });
}

function judgeHttp(status: number, headers: string, body: string, c: HttpCase, index: number, scanner: LeakScanner): Outcome {
  scanner.check(index, 'HTTP response headers', headers);
  scanner.check(index, 'an HTTP response body', body);
  const raw = /"rawBody":"([^"]*)"/.exec(body);
  if (raw) scanner.check(index, 'a rawBody', Buffer.from(raw[1]!, 'base64').toString('utf8'));
  if (c.allowed.includes(status)) return 'ok';
  return { wrong: `answered ${status}, expected one of ${c.allowed.join(', ')}: ${body.slice(0, 200)}` };
}

function execRawHttp(port: number, c: HttpCase, index: number, scanner: LeakScanner): Promise<Outcome> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port });
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => {
      socket.destroy();
      resolve('hang');
    }, DEADLINE_MS);
    socket.on('data', (d: Buffer) => chunks.push(d));
    socket.on('error', () => undefined); // a reset after the answer: 'close' judges what arrived
    socket.on('close', () => {
      clearTimeout(timer);
      const text = Buffer.concat(chunks).toString('latin1');
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0);
      const [headers = '', body = ''] = text.split('\r\n\r\n');
      resolve(judgeHttp(status, headers, body, c, index, scanner));
    });
    socket.end(c.raw!);
  });
}
