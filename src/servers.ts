import type { Server as HttpServer } from 'node:http';
import * as grpc from '@grpc/grpc-js';
import type { Logger } from 'pino';
import type { AdminHandler } from './control/admin-api.js';
import { createAdminServer, createHttpServer, createMetricsServer } from './http/http-server.js';
import type { Explanation } from './limiter/explain.js';
import type { DecisionInput } from './limiter/limiter.js';
import { type HandlerDeps, rateLimitService } from './rls/ratelimit-handler.js';
import { shouldRateLimitOnH2 } from './server/h2-rls.js';
import { MAX_RECEIVE_BYTES } from './server/h2-unary.js';
import type { HealthService } from './server/health.js';
import { takeMethod } from './server/hot-path.js';
import { bindGrpc, type ListenAddress, listen } from './server/listen.js';
import { HEALTH_SERVICE, RLQS_SERVICE, RLS_SERVICE, serviceDefinition } from './server/proto.js';
import { grpcServerCredentials } from './server/tls.js';
import { SERVE_OPTIONS, type Settings } from './settings/settings.js';
import type { Store } from './store/store.js';
import { isWorker, workerMetrics } from './workers.js';

/** The service's listeners, up and down: gRPC (RLS, RLQS, health), HTTP, the admin API and USE_PROMETHEUS's
 * metrics, bound in one go (a port that cannot be had releases the others) and drained in one go on stop. */

/** /readyz's answer: whether to take traffic, and why not. */
export type Readiness = () => { ready: boolean; reason?: string };

export interface Servers {
  grpc: grpc.Server;
  https: HttpServer[];
  grpcPort: number;
  httpPort: number;
  adminPort: number | undefined;
  prometheusPort: number | undefined;
}

/** USE_PROMETHEUS: the metrics on PROMETHEUS_ADDR too, where Envoy Gateway's Service and annotations point. */
async function listenMetrics(p: NonNullable<Settings['prometheus']>, deps: Parameters<typeof createMetricsServer>[0], https: HttpServer[]): Promise<number> {
  const server = createMetricsServer(deps, p.path);
  https.push(server);
  return listen(server, { host: p.host, port: p.port, what: 'metrics (USE_PROMETHEUS)', setBy: p.setBy });
}

/** Binds gRPC, HTTP and (when enabled) the admin API. A port that cannot be had is a ListenError naming it
 * and the flag and variable that set it; whatever was bound before is released. */
export async function startServers(
  settings: Settings,
  deps: {
    handler: HandlerDeps;
    rlqs: grpc.UntypedServiceImplementation;
    health: HealthService;
    ready: Readiness;
    explain: (i: DecisionInput) => Promise<Explanation>;
    admin: AdminHandler | undefined;
    logger: Logger;
  },
): Promise<Servers> {
  const grpcServer = new grpc.Server();
  const rls = serviceDefinition(RLS_SERVICE, deps.handler.bounds);
  grpcServer.addService(rls, rateLimitService(deps.handler));
  if (settings.grpcServer === 'http2') {
    const method = rls.ShouldRateLimit!;
    takeMethod(grpcServer, method.path, shouldRateLimitOnH2(deps.handler, method.responseSerialize, MAX_RECEIVE_BYTES));
  }
  grpcServer.addService(serviceDefinition(RLQS_SERVICE), deps.rlqs);
  grpcServer.addService(serviceDefinition(HEALTH_SERVICE), deps.health.handlers());
  const https: HttpServer[] = [];
  try {
    const grpcPort = await bindGrpc(grpcServer, address(settings.grpcHost, settings.grpcPort, 'gRPC', 'grpc'), await grpcServerCredentials(settings.grpcTls));
    const metricsText = isWorker() && deps.handler.metrics ? workerMetrics(deps.handler.metrics.registry) : undefined;
    const http = createHttpServer({ handler: deps.handler, ready: deps.ready, explain: deps.explain, metricsText });
    https.push(http);
    const httpPort = await listen(http, address(settings.httpHost, settings.httpPort, 'HTTP', 'http'));
    const prometheusPort = settings.prometheus && (await listenMetrics(settings.prometheus, { handler: deps.handler, metricsText }, https));
    const adminServer = deps.admin && createAdminServer(deps.admin, { logger: deps.logger, metrics: deps.handler.metrics });
    if (adminServer) https.push(adminServer);
    const adminPort = adminServer ? await listen(adminServer, address(settings.adminHost, settings.adminPort, 'the admin API', 'admin')) : undefined;
    return { grpc: grpcServer, https, grpcPort, httpPort, adminPort, prometheusPort: prometheusPort || undefined };
  } catch (err) {
    grpcServer.forceShutdown();
    for (const h of https) h.close();
    throw err;
  }
}

/** A listener's address, and for its error the flags and variables that set it. */
function address(host: string, port: number, what: string, option: 'grpc' | 'http' | 'admin'): ListenAddress {
  const set = (o: keyof typeof SERVE_OPTIONS): string => `--${o} or ${SERVE_OPTIONS[o].env}`;
  return { host, port, what, setBy: `${set(`${option}-port`)}, ${set(`${option}-host`)}` };
}

export async function stopAll(p: {
  grpcServer: grpc.Server;
  https: HttpServer[];
  health: HealthService;
  store: Store;
  logger: Logger;
  timeoutMs: number;
}): Promise<void> {
  p.health.set(false);
  p.health.endWatches();
  const drained = new Promise<void>((resolve) => p.grpcServer.tryShutdown(() => resolve()));
  const httpClosed = Promise.all(p.https.map((h) => new Promise<void>((resolve) => h.close(() => resolve()))));
  for (const h of p.https) h.closeIdleConnections();
  // The timeout bounds the whole shutdown: calls still open then, gRPC or HTTP (a client trickling a body
  // in), are cut; closing the store gets as long again.
  const timer = setTimeout(() => {
    p.logger.warn({ timeoutMs: p.timeoutMs }, 'in-flight calls did not finish in time: cutting them');
    p.grpcServer.forceShutdown();
    for (const h of p.https) h.closeAllConnections();
  }, p.timeoutMs);
  await Promise.all([drained, httpClosed]);
  clearTimeout(timer);
  await Promise.race([p.store.close(), new Promise((resolve) => setTimeout(resolve, p.timeoutMs).unref())]);
  p.logger.info('tollgate stopped');
}
