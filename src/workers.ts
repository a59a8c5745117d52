import cluster, { type Worker } from 'node:cluster';
import type { Logger } from 'pino';
import { AggregatorRegistry, type Registry } from 'prom-client';

/** `serve --workers N`: N processes share the gRPC, HTTP and admin ports (node:cluster hands connections out
 * in turn). Only with the Redis store, whose counters every process shares; the memory store's are per
 * process (settings refuse it). /metrics on any worker answers for all of them: the worker asks the primary,
 * which holds a snapshot of every worker's registry and aggregates them (prom-client's rules: counters and
 * histograms summed; a gauge by its own `aggregator`, see metrics.ts). The counters of a worker that died
 * stay in the sum (its last snapshot), so a restart never looks like a counter reset to rate(). */

const SNAPSHOT = 'tollgate:metrics-snapshot';
const METRICS_REQUEST = 'tollgate:metrics';
/** How long a worker waits for the primary's answer; the primary waits for snapshots for less, so a slow
 * worker costs its fresh snapshot (its last one is used), never the answer. */
const METRICS_TIMEOUT_MS = 3000;
const GATHER_TIMEOUT_MS = 1000;
/** Snapshots are also taken this often, so a worker that dies loses at most this much of its counts. */
const SNAPSHOT_EVERY_MS = 5000;
/** A worker that dies is started again, but not in a loop: past this many exits in a minute, the primary
 * stops every worker and exits 1, so the supervisor (Kubernetes, systemd) sees the failure and backs off. */
const RESTARTS_PER_MINUTE = 10;

/** A registry as getMetricsAsJSON() gives it (the parts read here). */
type Snapshot = { name: string; type: string; values: unknown[] }[];

interface SnapshotMessage {
  type: typeof SNAPSHOT;
  id: number;
  metrics?: Snapshot;
}

interface MetricsMessage {
  type: typeof METRICS_REQUEST;
  id: number;
  text?: string;
  error?: string;
}

const isSnapshot = (m: unknown): m is SnapshotMessage => (m as SnapshotMessage | null)?.type === SNAPSHOT;
const isMetricsMessage = (m: unknown): m is MetricsMessage => (m as MetricsMessage | null)?.type === METRICS_REQUEST;

export const isWorker = (): boolean => cluster.isWorker;

/** The primary: starts the workers, restarts one that dies, answers their /metrics requests, and on SIGTERM
 * or SIGINT passes the signal on and exits once every worker has. Resolves to the exit status. */
export function runPrimary(workers: number, logger: Logger): Promise<number> {
  const metrics = new FleetMetrics();
  const restarts: number[] = [];
  let stopping = false;
  let status = 0;
  const fork = (): Worker => {
    const w = cluster.fork();
    // A send to a worker that just died fails with an 'error' event: without a listener it would end the
    // primary and every worker with it.
    w.on('error', (err: Error) => logger.debug({ err: err.message }, 'worker channel'));
    w.on('message', (m: unknown) => {
      if (isMetricsMessage(m)) metrics.answer(w, m);
      else if (isSnapshot(m)) metrics.received(w.id, m);
    });
    return w;
  };
  const stop = (signal: NodeJS.Signals): void => {
    if (stopping) return;
    stopping = true;
    metrics.stop();
    for (const w of Object.values(cluster.workers ?? {})) w?.process.kill(signal);
  };
  cluster.on('exit', (w, code, signal) => {
    metrics.retire(w.id);
    if (stopping) return;
    const now = Date.now();
    restarts.push(now);
    while (restarts[0]! < now - 60_000) restarts.shift();
    logger.error({ pid: w.process.pid, code, signal }, 'worker exited');
    if (restarts.length <= RESTARTS_PER_MINUTE) {
      fork();
      return;
    }
    logger.fatal({ restarts: restarts.length }, 'workers keep exiting: stopping them all and exiting 1');
    status = 1;
    stop('SIGTERM');
  });
  for (let i = 0; i < workers; i++) fork();
  metrics.start();
  logger.info({ workers }, 'tollgate primary: workers started');
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  return new Promise((resolve) => {
    // node:cluster forgets a worker on the later of its 'exit' and 'disconnect': check on both.
    const done = (): void => {
      if (stopping && Object.keys(cluster.workers ?? {}).length === 0) resolve(status);
    };
    cluster.on('exit', done);
    cluster.on('disconnect', done);
  });
}

/** The primary's view of every worker's metrics: the latest snapshot of each living worker, and the counters
 * of those that died (summed into one snapshot). */
class FleetMetrics {
  private readonly latest = new Map<number, Snapshot>();
  /** Workers that exited: a snapshot of theirs arriving late (IPC may deliver after 'exit') is dropped. */
  private readonly gone = new Set<number>();
  /** The counters and histograms of workers that died; folded into one when they pile up. */
  private retired: Snapshot[] = [];
  private next = 0;
  private readonly waiting = new Map<number, { want: Set<number>; done: () => void }>();
  private timer: NodeJS.Timeout | undefined;

  start(): void {
    this.timer = setInterval(() => void this.gather(), SNAPSHOT_EVERY_MS);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  received(worker: number, m: SnapshotMessage): void {
    if (m.metrics && !this.gone.has(worker)) this.latest.set(worker, m.metrics);
    for (const [id, w] of this.waiting) {
      if (id !== m.id) continue;
      w.want.delete(worker);
      if (w.want.size === 0) w.done();
    }
  }

  /** A worker died: its counters and histograms stay counted; its gauges go with it. */
  retire(worker: number): void {
    this.gone.add(worker);
    const last = this.latest.get(worker);
    this.latest.delete(worker);
    for (const w of this.waiting.values()) {
      w.want.delete(worker);
      if (w.want.size === 0) w.done();
    }
    if (!last) return;
    this.retired.push(last.filter((m) => m.type === 'counter' || m.type === 'histogram'));
    if (this.retired.length < 8) return;
    const folding = this.retired;
    void AggregatorRegistry.aggregate(folding)
      .getMetricsAsJSON()
      .then((one) => {
        this.retired = [one as unknown as Snapshot, ...this.retired.filter((s) => !folding.includes(s))];
      });
  }

  /** Fresh snapshots from every living worker (at most METRICS_TIMEOUT_MS: a slow one keeps its last). */
  private gather(): Promise<void> {
    const living = Object.values(cluster.workers ?? {}).filter((w): w is Worker => w?.isConnected() === true);
    if (living.length === 0) return Promise.resolve();
    const id = this.next++;
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.waiting.delete(id);
        resolve();
      };
      const timer = setTimeout(done, GATHER_TIMEOUT_MS);
      this.waiting.set(id, { want: new Set(living.map((w) => w.id)), done });
      for (const w of living) w.send({ type: SNAPSHOT, id });
    });
  }

  /** A worker's /metrics request: gather, aggregate, answer with the text. */
  answer(w: Worker, m: MetricsMessage): void {
    this.gather()
      .then(() => AggregatorRegistry.aggregate([...this.latest.values(), ...this.retired]).metrics())
      .then(
        (text: string) => w.isConnected() && w.send({ type: METRICS_REQUEST, id: m.id, text }),
        (err: unknown) => w.isConnected() && w.send({ type: METRICS_REQUEST, id: m.id, error: (err as Error).message }),
      );
  }
}

/** In a worker: send the registry's snapshot when the primary asks, and return what /metrics should answer. */
export function workerMetrics(registry: Registry): () => Promise<string> {
  let next = 0;
  const waiting = new Map<number, { resolve: (text: string) => void; reject: (err: Error) => void }>();
  process.on('message', (m: unknown) => {
    if (isSnapshot(m)) {
      registry.getMetricsAsJSON().then(
        (metrics) => process.send?.({ type: SNAPSHOT, id: m.id, metrics }),
        () => process.send?.({ type: SNAPSHOT, id: m.id }), // no snapshot: the primary keeps the last
      );
      return;
    }
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
        reject(new Error("the primary did not answer with the workers' metrics in time"));
      }, METRICS_TIMEOUT_MS);
      waiting.set(id, {
        resolve: (text) => {
          clearTimeout(timer);
          resolve(text);
        },
        reject: (err) => {
          clearTimeout(timer);
          reject(err);
        },
      });
      process.send!({ type: METRICS_REQUEST, id });
    });
}
