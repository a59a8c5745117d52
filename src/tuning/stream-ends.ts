import type { ManualClock } from '../counters/clock.js';
import type { Decision, DescriptorInput } from '../limiter/limiter.js';
import type { MemoryStore } from '../store/memory-store.js';
import type { HeldSlot } from '../store/store.js';
import { EventQueue } from './event-queue.js';
import type { SlotLedger, TakenSlots } from './slot-ledger.js';

/** What a replay does after a request's time: its stream-done call at the stream's end, its slots' lease ends,
 * and the renewals a live Envoy's connection gets for slots of rules with max_hold (limiter/slot-keeper.ts: a
 * lease at a time, every third of the shortest such lease, up to take + max_hold). All on one bounded queue,
 * run in time order on the replay's clock. */

/** A request whose stream has not ended: its stream-done call, its client, the slots it holds. */
export interface Stream {
  done: DescriptorInput[];
  client: string | undefined;
  slots: TakenSlots[];
  /** Slots of rules with max_hold, which a live Envoy's connection has renewed. */
  held: HeldSlot[] | undefined;
  renewing: boolean;
}

type Pending = { kind: 'end'; stream: Stream } | { kind: 'renew'; stream: Stream } | { kind: 'release'; slots: TakenSlots };

export interface StreamEndDeps {
  clock: ManualClock;
  store: MemoryStore;
  slots: SlotLedger;
  /** The keeper's renewal period, when a rule has max_hold. */
  renewMs: number | undefined;
  /** Decides a stream-done call (Envoy ignores its answer). */
  decide: (descriptors: DescriptorInput[]) => Promise<Decision>;
  /** Hears what a stream-done call did (its charge, for the stream's client). */
  ended: (stream: Stream, d: Decision) => void;
}

export class StreamEnds {
  private readonly queue = new EventQueue<Pending>();

  constructor(private readonly deps: StreamEndDeps) {}

  get pending(): number {
    return this.queue.size;
  }

  /** A stream's end, and its slots' lease ends and renewals, on the queue. */
  schedule(stream: Stream, endMs: number, nowMs: number): void {
    const sent = stream.done.length > 0;
    if (sent) this.queue.push(endMs, { kind: 'end', stream });
    // Slots whose lease ends before their give-back (or that none gives back) are released at the lease's end.
    for (const s of stream.slots) if (!sent || s.holdEndMs <= endMs) this.release(s, s.holdEndMs);
    const renewMs = this.deps.renewMs;
    if (stream.held && renewMs !== undefined && (!sent || endMs >= nowMs + renewMs)) {
      stream.renewing = true;
      this.queue.push(nowMs + renewMs, { kind: 'renew', stream });
    }
  }

  /** Runs what is due by `timeMs`, in time order, on the clock (which never steps back). */
  async runUntil(timeMs: number): Promise<void> {
    const clock = this.deps.clock;
    for (let at = this.queue.peekTime(); at !== undefined && at <= timeMs; at = this.queue.peekTime()) {
      const { value } = this.queue.pop()!;
      if (at > clock.now()) clock.set(at);
      const now = clock.now();
      if (value.kind === 'release') this.deps.slots.release(value.slots, now);
      else if (value.kind === 'renew') this.renew(value.stream, now);
      else await this.streamEnd(value.stream, now);
    }
  }

  /** The stream-done call: its give-backs release slots; what it did not give back stays held until its lease
   * ends (renewed while the Envoy lives, as the keeper would). */
  private async streamEnd(stream: Stream, nowMs: number): Promise<void> {
    const d = await this.deps.decide(stream.done);
    this.deps.ended(stream, d);
    this.deps.slots.returned(d, stream.slots, nowMs);
    for (const s of stream.slots) if (!s.released && !s.releasing) this.release(s, Math.max(s.holdEndMs, nowMs));
    const renewMs = this.deps.renewMs;
    // renew(…, 0, now) renews nothing: it says whether the slot is still held.
    if (stream.held && !stream.renewing && renewMs !== undefined && stream.held.some((h) => this.deps.store.slots.renew(h.key, h.id, 0, nowMs))) {
      stream.renewing = true;
      this.queue.push(nowMs + renewMs, { kind: 'renew', stream });
    }
  }

  private release(s: TakenSlots, atMs: number): void {
    s.releasing = true;
    this.queue.push(atMs, { kind: 'release', slots: s });
  }

  /** A renewal, as the keeper makes one: each slot still held, to min(now + lease, take + max_hold). */
  private renew(stream: Stream, nowMs: number): void {
    const renewMs = this.deps.renewMs!;
    let any = false;
    for (const h of stream.held!) {
      if (nowMs < h.endMs && this.deps.store.slots.renew(h.key, h.id, Math.min(nowMs + h.leaseMs, h.endMs), nowMs)) any = true;
    }
    stream.renewing = any && stream.held!.some((h) => nowMs + renewMs < h.endMs);
    if (stream.renewing) this.queue.push(nowMs + renewMs, { kind: 'renew', stream });
  }
}
