import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { Code } from '../response/wire.js';
import { requestFromJson, responseToJson } from './json.js';
import { decideWire, failure, type HandlerDeps } from './ratelimit-handler.js';
import { toDecisionInput } from './request.js';
import type { DecisionInput } from '../limiter/limiter.js';
import { readJson, send } from './http-util.js';
import { httpStatusOf } from './status.js';

export interface HttpDeps {
  handler: HandlerDeps;
  /** Explains a request against the live config, tiers and counters (POST /explain). */
  explain?: (input: DecisionInput) => Promise<unknown>;
  /** The admin API, when TOLLGATE_ADMIN_TOKEN is set: answers /admin/*. */
  admin?: (req: IncomingMessage, res: ServerResponse, path: string) => Promise<void>;
  /** Alive and able to decide (config loaded, store usable or absorbed by the failure policy). */
  ready: () => { ready: boolean; reason?: string };
}

/** Health and debugging endpoints on the HTTP port. */
export function createHttpServer(deps: HttpDeps): Server {
  return createServer((req, res) => {
    route(deps, req, res).catch((err: unknown) => {
      deps.handler.logger.error({ err }, 'http handler failed');
      if (!res.headersSent) send(res, 500, { error: 'internal error' });
      else res.destroy();
    });
  });
}

async function route(deps: HttpDeps, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const path = (req.url ?? '/').split('?')[0] ?? '/';
  if (path === '/healthz' && req.method === 'GET') return send(res, 200, { status: 'ok' });
  if (path === '/readyz' && req.method === 'GET') {
    const r = deps.ready();
    return send(res, r.ready ? 200 : 503, { status: r.ready ? 'ready' : 'not ready', ...(r.reason && { reason: r.reason }) });
  }
  if (path === '/metrics' && req.method === 'GET' && deps.handler.metrics) {
    const registry = deps.handler.metrics.registry;
    const text = await registry.metrics();
    res.writeHead(200, { 'content-type': registry.contentType });
    res.end(text);
    return;
  }
  if (path.startsWith('/admin/') || path === '/admin') {
    if (!deps.admin) return send(res, 404, { error: 'the admin API is disabled: set TOLLGATE_ADMIN_TOKEN to enable it' });
    return deps.admin(req, res, path);
  }
  if (path === '/explain' && deps.explain) {
    if (req.method !== 'POST') return send(res, 405, { error: 'POST a JSON RateLimitRequest' });
    try {
      const input = toDecisionInput(requestFromJson(await readJson(req)), deps.handler.bounds);
      return send(res, 200, await deps.explain(input));
    } catch (err) {
      const s = failure(deps.handler, err);
      return send(res, httpStatusOf(s.code), { error: s.details });
    }
  }
  if (path === '/json') {
    if (req.method !== 'POST') return send(res, 405, { error: 'POST a JSON RateLimitRequest' });
    return json(deps, req, res);
  }
  send(res, 404, { error: 'not found', endpoints: ['GET /healthz', 'GET /readyz', 'GET /metrics', 'POST /json', 'POST /explain'] });
}

async function json(deps: HttpDeps, req: IncomingMessage, res: ServerResponse): Promise<void> {
  try {
    const body = await readJson(req);
    const response = await decideWire(deps.handler, requestFromJson(body));
    send(res, response.overall_code === Code.OVER_LIMIT ? 429 : 200, responseToJson(response));
  } catch (err) {
    const s = failure(deps.handler, err);
    send(res, httpStatusOf(s.code), { error: s.details });
  }
}
