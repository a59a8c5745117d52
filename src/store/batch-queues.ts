import type { Pending } from './redis-batch.js';

/** How long requests wait to share a script call: a call costs Redis a fixed part (reading, waking, the
 * script's setup: ~35 µs of a single decision's ~55 on this machine's loopback) that a lightly loaded replica
 * pays once a decision, and a Cluster master once per share of a batch. The first request after a flush opens
 * the window; at its end every queue goes, or a queue as soon as it holds `limit` requests (envoyproxy/ratelimit's
 * implicit pipelining: REDIS_PIPELINE_WINDOW is the time after which a pipeline is flushed, REDIS_PIPELINE_LIMIT
 * the commands that flush it sooner; its README, "Pipelining"). A request's deadline runs from its call's write. */
export interface BatchWindow {
  /** Whole milliseconds (Node's timers count no finer); 0: each event-loop turn. */
  windowMs: number;
  /** Requests in one destination's queue that send it at once; 0: no limit. */
  limit: number;
}

/** Most keys in one script call; a larger batch is split (a single request is never split). */
const MAX_BATCH_KEYS = 512;

/** The requests waiting for a script call, by destination (a Redis, a Cluster master, or a hash tag:
 * cluster-routes.ts; '' outside Cluster): each event-loop turn's go at its end (setImmediate runs after the poll
 * phase, so every request read from the sockets in the turn joins), or at the end of a batch window. `send` is
 * handed each call's requests. */
export class BatchQueues {
  private queues = new Map<string, Pending[]>();
  private flushing = false;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly send: (batch: Pending[], to: string) => void,
    private readonly window: BatchWindow = { windowMs: 0, limit: 0 },
  ) {}

  add(to: string, p: Pending): void {
    let queue = this.queues.get(to);
    if (!queue) {
      queue = [];
      this.queues.set(to, queue);
    }
    queue.push(p);
    if (this.window.limit > 0 && queue.length >= this.window.limit) {
      this.queues.delete(to);
      this.sendQueue(to, queue);
    } else if (!this.flushing) {
      this.flushing = true;
      if (this.window.windowMs > 0) this.timer = setTimeout(this.flush, this.window.windowMs);
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

  /** A destination's queue as one script call, or several past MAX_BATCH_KEYS. */
  private sendQueue(to: string, queue: Pending[]): void {
    let from = 0;
    let keys = 0;
    for (let i = 0; i < queue.length; i++) {
      const n = queue[i]!.checks.length;
      if (keys > 0 && keys + n > MAX_BATCH_KEYS) {
        this.send(queue.slice(from, i), to);
        from = i;
        keys = 0;
      }
      keys += n;
    }
    this.send(from === 0 ? queue : queue.slice(from), to);
  }
}
