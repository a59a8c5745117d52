import cluster, { type Worker } from 'node:cluster';
import type { Logger } from 'pino';
import { AggregatorRegistry, type PrometheusContentType, type Registry } from 'prom-client';

/** `serve --workers N`: N processes share the gRPC, HTTP and admin ports (node:cluster hands connections out
 * in turn). Only with the Redis store, whose counters every process shares; the memory store's are per
 * process (settings refuse it). /metrics on any worker answers for all of them: the worker asks the primary,
 * which gathers every worker's registry (prom-client's AggregatorRegistry) and sums it. */

const METRICS_REQUEST = 'tollgate:metrics';
const METRICS_TIMEOUT_MS = 3000;
/** A worker that dies is started again, but not in a loop: at most this many restarts a minute. */
const RESTARTS_PER_MINUTE = 10;

interface MetricsMessage {
  type: typeof METRICS_REQUEST;
  id: number;
  text?: string;
  error?: string;
}

const isMetricsMessage = (m: unknown): m is MetricsMessage => (m as MetricsMessage | null)?.type === METRICS_REQUEST;

export const isWorker = (): boolean => cluster.isWorker;

/** The primary: starts the workers, restarts one that dies, answers their /metrics requests, and on SIGTERM
 * or SIGINT passes the signal on and exits once every worker has. Never returns. */
export function runPrimary(workers: number, logger: Logger): Promise<number> {
  const aggregator = new AggregatorRegistry<PrometheusContentType>();
  const restarts: number[] = [];
  let stopping = false;
  const fork = (): Worker => {
    const w = cluster.fork();
    w.on('message', (m: unknown) => {
      if (isMetricsMessage(m)) answerMetrics(aggregator, w, m);
    });
    return w;
  };
  cluster.on('exit', (w, code, signal) => {
    if (stopping) return;
    const now = Date.now();
    restarts.push(now);
    while (restarts[0]! < now - 60_000) restarts.shift();
    logger.error({ pid: w.process.pid, code, signal }, 'worker exited');
    if (restarts.length <= RESTARTS_PER_MINUTE) fork();
    else logger.fatal({ restarts: restarts.length }, 'workers keep exiting: not restarting them');
  });
  for (let i = 0; i < workers; i++) fork();
  logger.info({ workers }, 'tollgate primary: workers started');
  const stop = (signal: NodeJS.Signals): void => {
    if (stopping) return;
    stopping = true;
    for (const w of Object.values(cluster.workers ?? {})) w?.process.kill(signal);
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  return new Promise((resolve) => {
    cluster.on('exit', () => {
      if (stopping && Object.keys(cluster.workers ?? {}).length === 0) resolve(0);
    });
  });
}

function answerMetrics(aggregator: AggregatorRegistry<PrometheusContentType>, w: Worker, m: MetricsMessage): void {
  aggregator.clusterMetrics().then(
    (text: string) => w.send({ type: METRICS_REQUEST, id: m.id, text }),
    (err: unknown) => w.send({ type: METRICS_REQUEST, id: m.id, error: (err as Error).message }),
  );
}

/** In a worker: report this registry when the primary gathers, and return what /metrics should answer. */
export function workerMetrics(registry: Registry): () => Promise<string> {
  new AggregatorRegistry(); // installs prom-client's answer to the primary's gathering, in this process
  AggregatorRegistry.setRegistries([registry]);
  let next = 0;
  const waiting = new Map<number, { resolve: (text: string) => void; reject: (err: Error) => void }>();
  process.on('message', (m: unknown) => {
    if (!isMetricsMessage(m)) return;
    const w = waiting.get(m.id);
    waiting.delete(m.id);
    if (m.text !== undefined) w?.resolve(m.text);
    else w?.reject(new Error(m.error ?? 'no metrics'));
  });
  return () =>
    new Promise((resolve, reject) => {
      const id = next++;
      const timer = setTimeout(() => {
        waiting.delete(id);
        reject(new Error('the primary did not answer with the workers\' metrics in time'));
      }, METRICS_TIMEOUT_MS);
      waiting.set(id, {
        resolve: (text) => (clearTimeout(timer), resolve(text)),
        reject: (err) => (clearTimeout(timer), reject(err)),
      });
      process.send!({ type: METRICS_REQUEST, id });
    });
}
