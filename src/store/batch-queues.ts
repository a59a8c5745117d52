import { performance } from 'node:perf_hooks';
import type { Pending } from './redis-batch.js';

/** How long requests wait to share a script call: a call costs Redis a fixed part (reading, waking, the
 * script's setup: ~35 µs of a single decision's ~55 on this machine's loopback) that a lightly loaded replica
 * pays once a decision, and a Cluster master once per share of a batch. The first request after a flush opens
 * the window; at its end every queue goes, or a queue as soon as it holds `limit` requests (envoyproxy/ratelimit's
 * implicit pipelining: REDIS_PIPELINE_WINDOW is the time after which a pipeline is flushed, REDIS_PIPELINE_LIMIT
 * the commands that flush it sooner; its README, "Pipelining"). */
export interface BatchWindow {
  /** Whole milliseconds (Node's timers count no finer); 0: each event-loop turn. */
  windowMs: number;
  /** With a window, requests in one destination's queue that send it at once; 0: no limit. */
  limit: number;
}

/** Most keys in one script call; a larger batch is split (a single request is never split). */
export const MAX_BATCH_KEYS = 512;

/** Sends one call's requests to `to`; `heldMs`: how long the window held them, which their deadline gives back. */
export type SendBatch = (batch: Pending[], to: string, heldMs: number) => void;

/** The requests waiting for a script call, by destination (a Redis, a Cluster master, or a hash tag:
 * cluster-routes.ts; '' outside Cluster): each event-loop turn's go at its end (setImmediate runs after the poll
 * phase, so every request read from the sockets in the turn joins), or at the end of a batch window. */
export class BatchQueues {
  private queues = new Map<string, Pending[]>();
  private flushing = false;
  private timer: NodeJS.Timeout | undefined;
  /** With a window: when each queue's first request came. */
  private readonly since = new Map<string, number>();

  constructor(
    private readonly send: SendBatch,
    private readonly window: BatchWindow = { windowMs: 0, limit: 0 },
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** Queues a request. `urgent`: it has waited for a window already (the second phase of a request split over
   * Cluster masters, a request sent again after a slot moved), so what is queued goes at the end of this turn. */
  add(to: string, p: Pending, urgent = false): void {
    let queue = this.queues.get(to);
    if (!queue) {
      queue = [];
      this.queues.set(to, queue);
      if (this.window.windowMs > 0) this.since.set(to, this.now());
    }
    queue.push(p);
    if (this.window.limit > 0 && queue.length >= this.window.limit) {
      this.queues.delete(to);
      this.sendQueue(to, queue);
    } else if (this.timer && urgent) {
      clearTimeout(this.timer);
      this.timer = undefined;
      setImmediate(this.flush); // `flushing` stays set: this flush replaces the window's
    } else if (!this.flushing) {
      this.flushing = true;
      if (this.window.windowMs > 0 && !urgent) this.timer = setTimeout(this.flush, this.window.windowMs);
      else setImmediate(this.flush);
    }
  }

  /** Sends what waits for a window now (the store closes). */
  flushNow(): void {
    if (!this.timer) return;
    clearTimeout(this.timer);
    this.flush();
  }

  private readonly flush = (): void => {
    this.flushing = false;
    this.timer = undefined;
    const queues = this.queues;
    this.queues = new Map();
    for (const [to, queue] of queues) this.sendQueue(to, queue);
  };

  /** A destination's queue as one script call, or several past MAX_BATCH_KEYS. A send that throws fails its
   * requests, never strands them. */
  private sendQueue(to: string, queue: Pending[]): void {
    const since = this.since.get(to);
    this.since.delete(to);
    const heldMs = since === undefined ? 0 : Math.max(0, this.now() - since);
    const send = (batch: Pending[]): void => {
      try {
        this.send(batch, to, heldMs);
      } catch (err) {
        for (const p of batch) p.reject(err as Error);
      }
    };
    let from = 0;
    let keys = 0;
    for (let i = 0; i < queue.length; i++) {
      const n = queue[i]!.checks.length;
      if (keys > 0 && keys + n > MAX_BATCH_KEYS) {
        send(queue.slice(from, i));
        from = i;
        keys = 0;
      }
      keys += n;
    }
    send(from === 0 ? queue : queue.slice(from));
  }
}
