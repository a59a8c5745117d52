import { isUtf8 } from 'node:buffer';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { Code } from '../response/wire.js';
import { requestFromJson, responseToJson } from './json.js';
import { decideWire, type HandlerDeps } from './ratelimit-handler.js';
import { toDecisionInput } from './request.js';
import type { DecisionInput } from '../limiter/limiter.js';
import { send } from './http-util.js';
import { httpStatusOf, toStatus } from './status.js';

export interface HttpDeps {
  handler: HandlerDeps;
  /** Explains a request against the live config, tiers and counters (POST /explain). */
  explain?: (input: DecisionInput) => Promise<unknown>;
  /** Alive and able to decide (config loaded, store usable or absorbed by the failure policy). */
  ready: () => { ready: boolean; reason?: string };
  /** The /metrics text when it is not this process's registry alone (--workers: every worker's, summed). */
  metricsText?: () => Promise<string>;
}

type Route = (req: IncomingMessage, res: ServerResponse, path: string) => Promise<void>;

/** The endpoints whose failures are counted (tollgate_http_errors_total), by path. */
type Endpoint = '/json' | '/explain';
/** Answers a failed call with a status and a message, and counts it. */
type Refuse = (status: number, error: string) => void;

/** Health and debugging endpoints on the HTTP port. */
export function createHttpServer(deps: HttpDeps): Server {
  return serve(deps.handler, (req, res, path) => route(deps, req, res, path));
}

/** The admin API (/admin/*) on a listener of its own, bound to loopback by default: the HTTP port can then
 * be opened to Prometheus without opening the admin API. Its error answers count under endpoint "/admin". */
export function createAdminServer(admin: Route, deps: Pick<HandlerDeps, 'logger' | 'metrics'>): Server {
  return serve(deps, async (req, res, path) => {
    res.once('finish', () => {
      if (res.statusCode >= 400) deps.metrics?.httpErrors.inc({ endpoint: '/admin', code: String(res.statusCode) });
    });
    if (path.startsWith('/admin/') || path === '/admin') return admin(req, res, path);
    send(res, 404, { error: 'not found', endpoints: ['/admin/tiers', '/admin/tokens'] });
  });
}

/** A handler that throws is answered 500 and counted, under its endpoint's name (never the path sent). */
function serve(deps: Pick<HandlerDeps, 'logger' | 'metrics'>, handle: Route): Server {
  return createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0] ?? '/';
    handle(req, res, path).catch((err: unknown) => {
      deps.logger.error({ err }, 'http handler failed');
      if (res.headersSent) return void res.destroy();
      send(res, 500, { error: 'internal error' });
      if (!path.startsWith('/admin')) deps.metrics?.httpErrors.inc({ endpoint: endpointOf(path), code: '500' });
    });
  });
}

const NAMED = ['/json', '/explain', '/metrics', '/healthz', '/readyz'];
const endpointOf = (path: string): string => (NAMED.includes(path) ? path : 'other');

async function route(deps: HttpDeps, req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
  if (path === '/healthz' && req.method === 'GET') return send(res, 200, { status: 'ok' });
  if (path === '/readyz' && req.method === 'GET') {
    const r = deps.ready();
    return send(res, r.ready ? 200 : 503, { status: r.ready ? 'ready' : 'not ready', ...(r.reason && { reason: r.reason }) });
  }
  if (path === '/metrics' && req.method === 'GET' && deps.handler.metrics) {
    const registry = deps.handler.metrics.registry;
    let text: string;
    try {
      text = await (deps.metricsText ?? (() => registry.metrics()))();
    } catch (err) {
      deps.handler.logger.warn({ err: (err as Error).message }, 'metrics not gathered');
      return send(res, 503, { error: 'metrics not gathered: the other workers did not answer in time' });
    }
    res.writeHead(200, { 'content-type': registry.contentType });
    res.end(text);
    return;
  }
  if (path.startsWith('/admin/') || path === '/admin') {
    return send(res, 404, { error: 'the admin API is on its own port (--admin-port), when TOLLGATE_ADMIN_TOKEN is set' });
  }
  if (path === '/explain' && deps.explain) {
    if (req.method !== 'POST') return refuser(deps, res, path)(405, 'POST a JSON RateLimitRequest');
    return explainRequest(deps, deps.explain, req, res);
  }
  if (path === '/json') {
    if (req.method !== 'POST') return refuser(deps, res, path)(405, 'POST a JSON RateLimitRequest');
    return json(deps, req, res);
  }
  send(res, 404, { error: 'not found', endpoints: ['GET /healthz', 'GET /readyz', 'GET /metrics', 'POST /json', 'POST /explain'] });
}

/** Answers failed calls of one endpoint and counts them there. They are HTTP calls, so they stay out of
 * tollgate_grpc_errors_total, which then counts what Envoy's calls met and nothing else. */
function refuser(deps: HttpDeps, res: ServerResponse, endpoint: Endpoint): Refuse {
  return (status, error) => {
    deps.handler.metrics?.httpErrors.inc({ endpoint, code: String(status) });
    send(res, status, { error });
  };
}

/** A thrown error answered through the one mapping (status.ts), as gRPC answers it. */
function refuseError(deps: HttpDeps, refuse: Refuse, err: unknown, during: string): void {
  const s = toStatus(err, deps.handler.logger, during);
  refuse(httpStatusOf(s.code), s.details);
}

async function explainRequest(deps: HttpDeps, explain: NonNullable<HttpDeps['explain']>, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const refuse = refuser(deps, res, '/explain');
  const body = await readBody(req, refuse);
  if (body === undefined) return;
  try {
    const input = toDecisionInput(requestFromJson(body), deps.handler.bounds);
    send(res, 200, await explain(input));
  } catch (err) {
    refuseError(deps, refuse, err, 'explaining');
  }
}

async function json(deps: HttpDeps, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const refuse = refuser(deps, res, '/json');
  const body = await readBody(req, refuse);
  if (body === undefined) return;
  try {
    const response = await decideWire(deps.handler, requestFromJson(body));
    send(res, response.overall_code === Code.OVER_LIMIT ? 429 : 200, responseToJson(response));
  } catch (err) {
    refuseError(deps, refuse, err, 'deciding');
  }
}

const MAX_BODY_BYTES = 1024 * 1024;

/** The parsed JSON body, or undefined after answering 415 (not application/json), 413 (over the bound)
 * or 400 (not UTF-8, not JSON). Bytes are checked for UTF-8 before decoding: decoding would replace bad
 * bytes with U+FFFD, and distinct invalid tokens would share one counter. */
async function readBody(req: IncomingMessage, refuse: Refuse): Promise<unknown> {
  if (!isJsonType(req.headers['content-type'])) {
    refuse(415, 'send the body as content-type: application/json');
    drain(req);
    return undefined;
  }
  const declared = Number(req.headers['content-length'] ?? 0);
  const bytes = declared > MAX_BODY_BYTES ? 'too large' : await collect(req, MAX_BODY_BYTES);
  if (bytes === 'aborted') return undefined;
  if (bytes === 'too large') {
    refuse(413, `body is larger than ${MAX_BODY_BYTES} bytes`);
    drain(req);
    return undefined;
  }
  if (!isUtf8(bytes)) {
    refuse(400, 'body is not valid UTF-8');
    return undefined;
  }
  try {
    return JSON.parse(bytes.toString('utf8')) as unknown;
  } catch {
    refuse(400, 'body is not valid JSON');
    return undefined;
  }
}

/** Reads and drops the rest of a refused body: closing with bytes unread would reset the connection, and a
 * client still writing could lose the answer. Bounded: past 16 MiB or 5 seconds the connection is cut. */
function drain(req: IncomingMessage): void {
  if (req.readableEnded) return;
  let dropped = 0;
  const timer = setTimeout(() => req.destroy(), 5000).unref();
  req.on('data', (chunk: Buffer) => {
    dropped += chunk.length;
    if (dropped > 16 * 1024 * 1024) req.destroy();
  });
  req.once('end', () => clearTimeout(timer));
  req.once('close', () => clearTimeout(timer));
}

/** application/json, in any case, with or without parameters such as charset. */
function isJsonType(header: string | undefined): boolean {
  return (header ?? '').split(';')[0]!.trim().toLowerCase() === 'application/json';
}

/** The body; 'too large' as soon as it grows past `max` (the rest is left to drain()); 'aborted' when
 * the client goes away first. */
function collect(req: IncomingMessage, max: number): Promise<Buffer | 'too large' | 'aborted'> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer): void => {
      size += chunk.length;
      if (size <= max) return void chunks.push(chunk);
      req.off('data', onData);
      req.pause();
      resolve('too large');
    };
    req.on('data', onData);
    req.once('end', () => resolve(Buffer.concat(chunks)));
    // After 'end' these change nothing: a promise settles once.
    req.once('error', () => resolve('aborted'));
    req.once('close', () => resolve('aborted'));
  });
}
