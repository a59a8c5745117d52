import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { DecisionInput } from '../limiter/limiter.js';
import { httpStatusOf, toStatus } from '../response/error-status.js';
import { Code } from '../response/wire.js';
import { decideWire, type HandlerDeps } from '../rls/ratelimit-handler.js';
import { toDecisionInput } from '../rls/request.js';
import { type Refuse, readJsonBody, send } from './http-util.js';
import { requestFromJson, responseToJson } from './json.js';
import { SharedRender } from './shared-render.js';

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

/** Health and debugging endpoints on the HTTP port. */
export function createHttpServer(deps: HttpDeps): Server {
  return serve(deps.handler, (req, res, path) => route(deps, req, res, path));
}

/** The admin API (/admin/*, /v1/spend) on a listener of its own, bound to loopback by default: the HTTP port can then
 * be opened to Prometheus without opening the admin API. Its error answers count under endpoint "/admin". */
export function createAdminServer(admin: Route, deps: Pick<HandlerDeps, 'logger' | 'metrics'>): Server {
  return serve(deps, async (req, res, path) => {
    res.once('finish', () => {
      if (res.statusCode >= 400) deps.metrics?.httpErrors.inc({ endpoint: '/admin', code: String(res.statusCode) });
    });
    if (path.startsWith('/admin/') || path === '/admin' || path === '/v1/spend' || path === '/v1/usage') return admin(req, res, path);
    send(res, 404, { error: 'not found', endpoints: ['/admin/tiers', '/admin/tokens', '/admin/in-flight', '/v1/spend', '/v1/usage'] });
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

const NAMED = ['/json', '/explain', '/metrics', '/healthz', '/readyz', '/healthcheck'];
const endpointOf = (path: string): string => (NAMED.includes(path) ? path : 'other');

async function route(deps: HttpDeps, req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
  if (path === '/healthz' && req.method === 'GET') return send(res, 200, { status: 'ok' });
  if (path === '/readyz' && req.method === 'GET') {
    const r = deps.ready();
    return send(res, r.ready ? 200 : 503, { status: r.ready ? 'ready' : 'not ready', ...(r.reason && { reason: r.reason }) });
  }
  if (path === '/healthcheck' && req.method === 'GET') {
    // envoyproxy/ratelimit's probe (src/server/health.go), which Envoy Gateway's manifests use: "OK" when ready,
    // an empty 500 when not.
    const ready = deps.ready().ready;
    res.writeHead(ready ? 200 : 500, { 'content-type': 'text/plain' });
    res.end(ready ? 'OK' : '');
    return;
  }
  if (path === '/metrics' && req.method === 'GET' && deps.handler.metrics) return metrics(deps, res);
  if (path.startsWith('/admin/') || path === '/admin' || path === '/v1/spend' || path === '/v1/usage') {
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
  send(res, 404, { error: 'not found', endpoints: ['GET /healthz', 'GET /readyz', 'GET /healthcheck', 'GET /metrics', 'POST /json', 'POST /explain'] });
}

/** USE_PROMETHEUS's listener (PROMETHEUS_ADDR): the metrics at `path` and nothing else, so that port can be
 * opened to a scraper without opening /json, /explain or, on any port but its own, the admin API. */
export function createMetricsServer(deps: Pick<HttpDeps, 'handler' | 'metricsText'>, path: string): Server {
  return serve(deps.handler, async (req, res, p) => {
    if (p === path && req.method === 'GET' && deps.handler.metrics) return metrics(deps, res);
    send(res, 404, { error: 'not found', endpoints: [`GET ${path}`] });
  });
}

/** Scrapes of one listener share renders, at most one each RENDER_INTERVAL_MS (shared-render.ts). */
const RENDER_INTERVAL_MS = 100;
const renders = new WeakMap<object, SharedRender>();

async function metrics(deps: Pick<HttpDeps, 'handler' | 'metricsText'>, res: ServerResponse): Promise<void> {
  const registry = deps.handler.metrics!.registry;
  let render = renders.get(deps);
  if (!render) {
    render = new SharedRender(deps.metricsText ?? (() => registry.metrics()), RENDER_INTERVAL_MS);
    renders.set(deps, render);
  }
  let text: string;
  try {
    text = await render.text();
  } catch (err) {
    deps.handler.logger.warn({ err: (err as Error).message }, 'metrics not gathered');
    return send(res, 503, { error: 'metrics not gathered: the other workers did not answer in time' });
  }
  res.writeHead(200, { 'content-type': registry.contentType });
  res.end(text);
}

/** Answers failed calls of one endpoint and counts them there. They are HTTP calls, so they stay out of
 * tollgate_grpc_errors_total, which then counts what Envoy's calls met and nothing else. */
function refuser(deps: HttpDeps, res: ServerResponse, endpoint: Endpoint): Refuse {
  return (status, error) => {
    deps.handler.metrics?.httpErrors.inc({ endpoint, code: String(status) });
    send(res, status, { error });
  };
}

/** A thrown error answered through the one mapping (response/error-status.ts), as gRPC answers it. */
function refuseError(deps: HttpDeps, refuse: Refuse, err: unknown, during: string): void {
  const s = toStatus(err, deps.handler.logger, during);
  refuse(httpStatusOf(s.code), s.details);
}

async function explainRequest(deps: HttpDeps, explain: NonNullable<HttpDeps['explain']>, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const refuse = refuser(deps, res, '/explain');
  const body = await readJsonBody(req, refuse);
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
  const body = await readJsonBody(req, refuse, { anyType: true });
  if (body === undefined) return;
  try {
    const response = await decideWire(deps.handler, requestFromJson(body), { kind: 'json', headers: req.headers });
    send(res, response.overall_code === Code.OVER_LIMIT ? 429 : 200, responseToJson(response));
  } catch (err) {
    refuseError(deps, refuse, err, 'deciding');
  }
}
