import { performance } from 'node:perf_hooks';
import type { CounterCheck } from '../limits/check.js';
import { ALGORITHMS } from '../limits/kinds/index.js';
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
/** Sends one call's requests to `to`; `heldMs`: how long the window held them, which their deadline gives back.
 * Its promise, if any, settles when the call is over (answered, failed or timed out). */
export type SendBatch = (batch: Pending[], to: string, heldMs: number) => Promise<unknown> | undefined;

/** Without a window, in a busy turn (BUSY_TURN requests or more queued, or sent and not answered yet: more are
 * coming), a queue of a destination that `gathers` (a Cluster master: one of several that share each turn's
 * requests) with fewer requests than GATHER_BELOW waits for the end of the next turn, for at most GATHER_TURNS
 * turns. A master's call costs it a fixed part (waking, reading, the script's setup), which a third of a turn's
 * batch pays three times as often as one Redis pays it: through the service at 64 calls in flight, a 3-master
 * Cluster ran 0.20 script calls a decision against one Redis's 0.07, and 2.1–2.3× its Redis CPU a decision (issue
 * 53, bench/cluster-service.mjs). A busy process reads its sockets again while a share waits, so the share grows by
 * what came: 0.13–0.14 calls a decision. (More turns gathered no more at 64 in flight: what waits here is not in
 * Redis, and the loop holds 64 in all.) A quiet process has nothing coming to wait for, so its shares go at the end
 * of their turn; one Redis, which gets the whole turn, never waits. */
export const GATHER_BELOW = 16;
export const GATHER_TURNS = 3;
export const BUSY_TURN = 8;
/** However long its turns, a share gathers for at most this long: what it waits comes off the Redis deadline of
 * every request in it (25 ms by default), as a batch window's does, so it is kept as short as a window's shortest. */
export const GATHER_MAX_MS = 2;

/** The requests waiting for a script call, by destination (a Redis, a Cluster master, or a hash tag:
 * cluster-routes.ts; '' outside Cluster): each event-loop turn's go at its end (setImmediate runs after the poll
 * phase, so every request read from the sockets in the turn joins), a small one of a master's at the end of the
 * next turn (GATHER_BELOW), or at the end of a batch window. */
export class BatchQueues {
  private queues = new Map<string, Pending[]>();
  private flushing = false;
  private timer: NodeJS.Timeout | undefined;
  /** With a window, when each queue's first request came; else when a queue began to gather. */
  private readonly since = new Map<string, number>();
  /** Requests queued, and sent but not answered: together at BUSY_TURN, a busy turn. */
  private queued = 0;
  private outstanding = 0;
  /** The queues that have waited a turn already (GATHER_BELOW). */
  private readonly waited = new Map<string, number>();

  constructor(
    private readonly send: SendBatch,
    private readonly window: BatchWindow = { windowMs: 0, limit: 0 },
    private readonly now: () => number = () => performance.now(),
    private readonly gathers?: (to: string) => boolean,
  ) {}

  /** Queues a request. `urgent`: it has waited for a window already (the second phase of a request split over
   * Cluster masters, a request sent again after a slot moved), so what is queued goes at the end of this turn. */
  add(to: string, p: Pending, urgent = false): void {
    if (p.atMs !== undefined) {
      this.sendCall(to, [p], 0); // its own time: its own call, now (it waited for its count's reply already)
      return;
    }
    let queue = this.queues.get(to);
    if (!queue) {
      queue = [];
      this.queues.set(to, queue);
      if (this.window.windowMs > 0) this.since.set(to, this.now());
    }
    queue.push(p);
    this.queued++;
    if (this.window.limit > 0 && queue.length >= this.window.limit) {
      this.queues.delete(to);
      this.sendQueue(to, queue);
    } else if (urgent) {
      this.waited.set(to, GATHER_TURNS); // it has waited: it goes at the end of this turn, whatever its size
      if (this.timer) this.rushWindow();
      else this.schedule(true);
    } else this.schedule(false);
  }

  /** An urgent request ends the batch window: what waits goes with it at the end of the turn. */
  private rushWindow(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    setImmediate(this.flush); // `flushing` stays set: this flush replaces the window's
  }

  /** A flush at the end of the window (`now`: of this turn), unless one is due already. */
  private schedule(now: boolean): void {
    if (this.flushing) return;
    this.flushing = true;
    if (this.window.windowMs > 0 && !now) this.timer = setTimeout(this.flush, this.window.windowMs);
    else setImmediate(this.flush);
  }

  /** Sends what waits now, for a window or a turn (the store closes). */
  flushNow(): void {
    clearTimeout(this.timer);
    this.flush(true);
  }

  private readonly flush = (all = false): void => {
    this.flushing = false;
    this.timer = undefined;
    let held = false;
    // Nothing of this for a store none of whose destinations gathers (one Redis): its calls cost what they did.
    const busy = this.gathers !== undefined && !all && this.window.windowMs === 0 && this.queued + this.outstanding >= BUSY_TURN;
    for (const [to, queue] of this.queues) {
      if (busy && queue.length < GATHER_BELOW && this.gathers!(to) && this.gather(to)) {
        held = true;
        continue;
      }
      if (this.waited.size > 0) this.waited.delete(to);
      this.queues.delete(to);
      this.sendQueue(to, queue);
    }
    if (held) this.schedule(true);
  };

  /** Whether `to`'s share waits for the next turn: it has waited fewer than GATHER_TURNS, for under GATHER_MAX_MS. */
  private gather(to: string): boolean {
    const turns = this.waited.get(to) ?? 0;
    const since = this.since.get(to);
    if (turns >= GATHER_TURNS || (since !== undefined && this.now() - since >= GATHER_MAX_MS)) return false;
    this.waited.set(to, turns + 1); // GATHER_BELOW: at the end of the next turn, with what it brings
    // Its deadline gives back the turns it waits, not the one it came in: reading a burst is not Redis's delay.
    if (turns === 0) this.since.set(to, this.now());
    return true;
  }

  /** A destination's queue as one script call, or several past MAX_BATCH_KEYS. A send that throws fails its
   * requests, never strands them. */
  private sendQueue(to: string, queue: Pending[]): void {
    this.queued -= queue.length;
    const since = this.since.get(to);
    this.since.delete(to);
    const heldMs = since === undefined ? 0 : Math.max(0, this.now() - since);
    let from = 0;
    let keys = 0;
    for (let i = 0; i < queue.length; i++) {
      const n = weight(queue[i]!.checks);
      if (keys > 0 && keys + n > MAX_BATCH_KEYS) {
        this.sendCall(to, queue.slice(from, i), heldMs);
        from = i;
        keys = 0;
      }
      keys += n;
    }
    this.sendCall(to, from === 0 ? queue : queue.slice(from), heldMs);
  }

  /** One script call; its requests count as waiting for Redis until it is over. */
  private sendCall(to: string, batch: Pending[], heldMs: number): void {
    try {
      const call = this.send(batch, to, heldMs);
      if (!call || this.gathers === undefined) return; // only a store that gathers needs to know what is out
      this.outstanding += batch.length;
      const over = (): void => {
        this.outstanding -= batch.length;
      };
      call.then(over, over);
    } catch (err) {
      for (const p of batch) p.reject(err as Error);
    }
  }
}

/** A request's keys, each check weighing what its kind says (an in-flight check: 16, limits/kinds/in-flight.ts). */
function weight(checks: readonly CounterCheck[]): number {
  let n = 0;
  for (const c of checks) n += ALGORITHMS[c.kind]!.weight;
  return n;
}
