import type { Server as HttpServer } from 'node:http';
import * as grpc from '@grpc/grpc-js';
import type { Logger } from 'pino';
import type { AdminHandler } from './control/admin-api.js';
import { createAdminServer, createHttpServer, createMetricsServer } from './http/http-server.js';
import type { Explanation } from './limiter/explain.js';
import type { DecisionInput } from './limiter/limiter.js';
import type { WireResponse } from './response/wire.js';
import { type HandlerDeps, rateLimitService } from './rls/ratelimit-handler.js';
import { ByteBudget } from './server/byte-budget.js';
import { ConnectionGate } from './server/connection-gate.js';
import { shouldRateLimitOnH2 } from './server/h2-rls.js';
import type { HealthService } from './server/health.js';
import { guardPort, type PortGuard } from './server/hot-path.js';
import { bindGrpc, type ListenAddress, listen } from './server/listen.js';
import * as bounds from './server/port-bounds.js';
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
  /** GRPC_PLAINTEXT_PORT, bound. */
  grpcPlaintextPort: number | undefined;
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
  const grpcServer = new grpc.Server(bounds.grpcServerOptions());
  const rls = serviceDefinition(RLS_SERVICE, deps.handler.bounds);
  grpcServer.addService(rls, rateLimitService(deps.handler));
  const rlqs = serviceDefinition(RLQS_SERVICE);
  grpcServer.addService(rlqs, deps.rlqs);
  const health = serviceDefinition(HEALTH_SERVICE);
  grpcServer.addService(health, deps.health.handlers());
  guardPort(grpcServer, portGuard(settings, deps.handler, [rlqs.StreamRateLimitQuotas!.path, health.Watch!.path], rls.ShouldRateLimit!));
  const https: HttpServer[] = [];
  try {
    const port = await grpcServerCredentials(settings.grpcTls, undefined, {
      onUnusable: (what, code) => {
        deps.logger.warn({ files: what, code }, 'gRPC TLS files changed and cannot be used: the last good ones stay in force');
        deps.handler.metrics?.tlsReloadFailures.inc();
      },
    });
    const grpcPort = await bindGrpc(grpcServer, address(settings.grpcHost, settings.grpcPort, 'gRPC', 'grpc'), port.credentials);
    const grpcPlaintextPort = await plaintextPort(settings, grpcServer);
    const metricsText = isWorker() && deps.handler.metrics ? workerMetrics(deps.handler.metrics.registry) : undefined;
    // The port's certificate is part of readiness: one that has expired takes no new client.
    const ready: Readiness = () => {
      const problem = port.problem();
      return problem ? { ready: false, reason: problem } : deps.ready();
    };
    const http = createHttpServer({ handler: deps.handler, ready, explain: deps.explain, metricsText });
    https.push(http);
    const httpPort = await listen(http, address(settings.httpHost, settings.httpPort, 'HTTP', 'http'));
    const prometheusPort = settings.prometheus && (await listenMetrics(settings.prometheus, { handler: deps.handler, metricsText }, https));
    const adminServer = deps.admin && createAdminServer(deps.admin, { logger: deps.logger, metrics: deps.handler.metrics });
    if (adminServer) https.push(adminServer);
    const adminPort = adminServer ? await listen(adminServer, address(settings.adminHost, settings.adminPort, 'the admin API', 'admin')) : undefined;
    return { grpc: grpcServer, https, grpcPort, grpcPlaintextPort, httpPort, adminPort, prometheusPort: prometheusPort || undefined };
  } catch (err) {
    grpcServer.forceShutdown();
    for (const h of https) h.close();
    throw err;
  }
}

/** The same server, so the same services, bounds and hot path, on a second port without TLS: Envoy AI
 * Gateway's quota cluster (its internal/extensionserver/quota_ratelimit.go) has no transport socket, while
 * Envoy Gateway's Envoys reach the TLS port. */
function plaintextPort(settings: Settings, server: grpc.Server): Promise<number> | undefined {
  if (settings.grpcPlaintextPort === undefined) return undefined;
  const setBy = `--grpc-plaintext-port or ${SERVE_OPTIONS['grpc-plaintext-port'].env}`;
  const at = { host: settings.grpcHost, port: settings.grpcPlaintextPort, what: 'gRPC (plaintext)', setBy };
  return bindGrpc(server, at, grpc.ServerCredentials.createInsecure());
}

/** The port's bounds (port-bounds.ts), and under GRPC_SERVER=http2 ShouldRateLimit taken from grpc-js. */
function portGuard(settings: Settings, handler: HandlerDeps, streaming: string[], method: grpc.MethodDefinition<unknown, unknown>): PortGuard {
  const budget = new ByteBudget(bounds.MAX_HELD_BYTES_PER_CONNECTION, bounds.MAX_HELD_BYTES);
  const gate = new ConnectionGate({
    perAddress: bounds.MAX_CONNECTIONS_PER_ADDRESS,
    inAll: bounds.MAX_CONNECTIONS,
    burst: bounds.NEW_CONNECTIONS_BURST,
    perSecond: bounds.NEW_CONNECTIONS_PER_SECOND,
  });
  const screen = { defaultDeadlineMs: bounds.DEFAULT_DEADLINE_MS, streaming: new Set(streaming) };
  const limits = { maxBytes: bounds.MAX_RLS_MESSAGE_BYTES, budget, defaultDeadlineMs: bounds.DEFAULT_DEADLINE_MS };
  handler.metrics?.gauge(
    'tollgate_grpc_request_bytes_held',
    'Bytes of gRPC request messages held now, buffered or inflated (docs/security.md "Bounds")',
    () => budget.total,
  );
  handler.metrics?.gauge('tollgate_grpc_connections', 'gRPC connections open now', () => gate.size);
  const hot =
    settings.grpcServer === 'http2'
      ? { path: method.path, handle: shouldRateLimitOnH2(handler, method.responseSerialize as (m: WireResponse) => Buffer, limits) }
      : undefined;
  const peers = handler.peers;
  return { gate, budget, screen, hot, onSession: peers && ((s) => peers.opened(s)), onRefused: (why) => handler.metrics?.portRefusals.inc({ reason: why }) };
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
