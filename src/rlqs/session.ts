import { status } from '@grpc/grpc-js';
import type { StoreUnavailableError } from '../errors.js';
import { abandonAction, assignAction, responses } from './actions.js';
import type { BucketBudget } from './bounds.js';
import { Meter } from './cpu.js';
import { decodeUsageReports, peekDomain } from './decode.js';
import type { StreamDeps, StreamOutlet } from './deps.js';
import type { WireBucketId, WireUsage } from './messages.js';
import { openingRefusal } from './opening.js';
import { ALLOW, rateOf, type Strategy, sameStrategy } from './quota/strategy.js';
import { addRead, emptyRead, SLICE, sliceByShareKey, slicesOf } from './slices.js';
import { type ReadReport, type StreamBucket, StreamBuckets } from './stream-buckets.js';
import { type Assigned, countActions, countRead, summarize, tally } from './summary.js';

/** The protocol state of one RLQS stream, and the one owner of its assignments: it answers the reports its
 * stream read, in slices (slices.ts) each in its turn of RLQS's share of the process (cpu.ts); re-assigns the
 * buckets whose grant moved (another instance's, or this stream's own lowered rate once sent); and watches the
 * share keys of the buckets it holds. Its stream (stream.ts) only reads and writes the messages. Reports and
 * re-assignments run one at a time, in order. */

/** A stream's answers begin at least this share of the report interval apart (1 s at Envoy's 5 s). */
const MIN_GAP_SHARE = 0.2;
/** Answer messages the client has not read when the next answer is due: past this, it is not reading, and the
 * stream is ended. One answer is at most a report's buckets over ACTIONS_PER_MESSAGE messages (actions.ts; a
 * report is bounded by the 4 MiB message limit), so what a stream holds unsent stays bounded too. */
const MAX_UNREAD_MESSAGES = 32;

export class QuotaSession {
  private domain: string | undefined;
  private claimed = '';
  private release: (() => void) | undefined;
  private buckets: StreamBuckets | undefined;
  private queue: Promise<void> = Promise.resolve();
  /** When the last answer began. */
  private lastAnswerMs = -Infinity;
  private busy = false;
  /** What the work under way has spent of RLQS's share (metered()). */
  private meter: Meter;
  private ended = false;
  private boundLogged = false;
  /** Share keys this stream watches for moves (QuotaService.watch), and the re-assignments waiting. */
  private readonly watching = new Map<string, () => void>();
  private readonly pushing = new Set<string>();
  /** Share keys whose rate this stream lowered in the answer being sent (see told()). */
  private readonly shrunk = new Set<string>();

  constructor(
    private readonly stream: StreamOutlet,
    private readonly deps: StreamDeps,
    private readonly budget: BucketBudget,
  ) {
    this.meter = new Meter(deps.cpu);
  }

  /** Buckets this stream holds. */
  get size(): number {
    return this.buckets?.size ?? 0;
  }

  /** The Envoy instance's fingerprint ('' before the first report). */
  get instance(): string {
    return this.claimed;
  }

  /** Reports are being answered: the client is waiting for us. */
  get answering(): boolean {
    return this.busy;
  }

  /** Runs once the work queued so far is done. */
  settled(): Promise<void> {
    return this.queue;
  }

  /** Reports and re-assignments run one at a time, in order. Whatever one throws that it did not expect (a
   * bug) ends this stream with INTERNAL, logged by class: never an unhandled rejection. */
  enqueue(work: () => Promise<void>): void {
    this.queue = this.queue.then(work).catch((err: unknown) => {
      this.deps.logger.error({ err: (err as Error)?.constructor?.name, instance: this.claimed }, 'rlqs stream failed on an internal error; ended');
      this.stream.fail('internal', status.INTERNAL, 'internal error');
    });
  }

  /** Answers what is waiting, in one answer: no sooner than the stream's gap after its last one, and when RLQS's
   * share of the process allows (cpu.ts). Reports that came meanwhile are answered together. */
  async answerPending(): Promise<void> {
    this.busy = true;
    const gapMs = MIN_GAP_SHARE * this.deps.limits.reportIntervalMs;
    const wait = this.stream.ending ? 0 : this.lastAnswerMs + gapMs - Date.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait).unref());
    const release = await this.deps.slots.take();
    try {
      await this.metered(() => this.answerWaiting());
    } finally {
      release();
      this.busy = false;
    }
  }

  /** Decodes what waits (one message a turn) and answers it; past twice the bucket bound of usages, the rest of
   * the messages are not decoded (`too_many_reports`). */
  private async answerWaiting(): Promise<void> {
    await this.nextSlice(false);
    const raws = this.stream.take();
    if (this.ended) return;
    const usages: WireUsage[] = [];
    const most = 2 * this.deps.limits.maxBuckets;
    for (const [n, raw] of raws.entries()) {
      if (usages.length >= most) {
        this.deps.metrics?.streamErrors.inc({ reason: 'too_many_reports' }, raws.length - n);
        break;
      }
      if (n > 0 && !(await this.nextSlice())) return;
      const msg = decodeUsageReports(raw);
      if (!msg) {
        this.stream.fail('undecodable', status.INVALID_ARGUMENT, 'a message is not a RateLimitQuotaUsageReports');
        return;
      }
      for (const u of msg.bucket_quota_usages) usages.push(u); // its domain was checked as it came (accepts())
    }
    this.lastAnswerMs = Date.now();
    await this.answer(usages);
  }

  /** A report as it arrives, read without decoding its usages: a stream that changes its domain, names none or
   * sends bytes that are not a report is told at once, not when its report's turn comes. */
  accepts(raw: Buffer): boolean {
    const domain = peekDomain(raw);
    if (domain === undefined) {
      this.stream.fail('undecodable', status.INVALID_ARGUMENT, 'a message is not a RateLimitQuotaUsageReports');
      return false;
    }
    return this.opened(domain);
  }

  /** The first message names the domain; a later one may repeat it (Envoy's does) but not change it. */
  private opened(domain: string): boolean {
    if (this.domain === undefined) {
      const named = this.stream.instanceName;
      const refused = openingRefusal(domain, this.deps.limits.bounds.maxValueBytes, named);
      if (refused) {
        this.stream.fail(refused.reason, status.INVALID_ARGUMENT, refused.details);
        return false;
      }
      const claim = this.deps.instances.claim(domain, this.stream.peer, named);
      this.domain = domain;
      this.claimed = claim.instance;
      this.release = claim.release;
      this.buckets = new StreamBuckets(this.deps.limits, (id) => this.deps.quota.plan(domain, id), this.budget);
      return true;
    }
    if (domain !== '' && domain !== this.domain) {
      this.stream.fail(
        'domain_changed',
        status.INVALID_ARGUMENT,
        `the domain changed mid-stream (a ${domain.length}-character one after a ${this.domain.length}-character one)`,
      );
      return false;
    }
    return true;
  }

  /** Answers a report in slices (slices.ts): its buckets read, then assigned and sent a slice at a time, each
   * in its turn of RLQS's share of the process, so RLS decisions are served between them. */
  private async answer(usages: readonly WireUsage[]): Promise<void> {
    if (this.ended) return;
    // With the store known down no bucket can be answered: the report is counted, not read (planning thousands
    // of buckets for nothing would be the most work a process whose Redis froze does).
    const down = this.deps.quota.unavailable();
    if (down) {
      this.deps.unanswered.report(down, this.claimed);
      return;
    }
    // Messages of earlier answers still unsent: Envoy reads its answers long before its next report.
    if (this.stream.unread() >= MAX_UNREAD_MESSAGES) {
      this.stream.fail('not_reading', status.RESOURCE_EXHAUSTED, `the client left ${this.stream.unread()} answer messages unread`);
      return;
    }
    const startMs = Date.now();
    const read = emptyRead();
    // At most twice the bucket bound of usages are read from one answer (Envoy sends one per bucket it holds).
    const most = 2 * this.deps.limits.maxBuckets;
    if (usages.length > most) this.deps.metrics?.refused.inc({ reason: 'too_many_buckets' }, usages.length - most);
    for (const [n, part] of slicesOf(usages.slice(0, most)).entries()) {
      if (n > 0 && !(await this.nextSlice())) return;
      const r = this.buckets!.read(part, startMs);
      this.observeRead(r);
      addRead(read, r);
    }
    const { sent, failure } = await this.assignSlices(read, usages.length > SLICE);
    if (failure) this.deps.unanswered.report(failure, this.claimed);
    if (this.ended) return;
    for (const [n, ids] of slicesOf(read.overflow).entries()) if (n === 0 || (await this.nextSlice())) this.send([], [], ids);
    for (const [n, ids] of slicesOf(read.abandon).entries()) if (n === 0 || (await this.nextSlice())) this.send([], ids, []);
    this.confirmShrinks();
    this.rewatch();
    this.deps.onAssigned?.(summarize(this.label(), this.claimed, read, sent, failure?.constructor.name), startMs);
  }

  /** Assigns and sends the buckets read, a slice at a time. A bucket the store could not answer gets nothing:
   * its Envoy keeps what it has until its TTL. */
  private async assignSlices(read: ReadReport, yieldFirst: boolean): Promise<{ sent: Assigned[]; failure?: StoreUnavailableError }> {
    const sent: Assigned[] = [];
    let failure: StoreUnavailableError | undefined;
    for (const [n, idx] of sliceByShareKey(read.buckets.map((b) => b.plan.shareKey)).entries()) {
      if ((n > 0 || yieldFirst) && !(await this.nextSlice())) break;
      const assigned = await this.deps.quota.assign(
        this.claimed,
        idx.map((i) => read.usages[i]!),
      );
      failure ??= assigned.failure;
      if (this.ended) break;
      const part = this.assigned(
        idx.map((i) => read.buckets[i]!),
        assigned.strategies,
      );
      this.send(part, [], []);
      sent.push(...part);
    }
    return { sent, failure };
  }

  /** Lets the event loop go, then waits for RLQS's next turn (the work since the last charged to RLQS's share);
   * false if the stream ended meanwhile. */
  private async nextSlice(letGo = true): Promise<boolean> {
    if (letGo) await new Promise((r) => setImmediate(r));
    await this.meter.turn();
    return !this.ended;
  }

  /** Runs one piece of this stream's work, charged to RLQS's share of the process. */
  private async metered(work: () => Promise<void>): Promise<void> {
    this.meter = new Meter(this.deps.cpu);
    try {
      await work();
    } finally {
      this.meter.settle();
    }
  }

  /** The buckets that got a strategy, with what they are told. */
  private assigned(buckets: readonly StreamBucket[], strategies: readonly (Strategy | undefined)[]): Assigned[] {
    return buckets.flatMap((b, i) => {
      const s = strategies[i];
      return s ? [this.told(b, s)] : [];
    });
  }

  /** Records what a bucket is told. A lower rate than before is held in the share table as the old one until
   * it is sent: once it is, its bucket is re-assigned, which records the lower rate and tells the replicas. */
  private told(b: StreamBucket, s: Strategy): Assigned {
    if (b.sent && rateOf(s) < rateOf(b.sent) && b.plan.shareKey !== '') this.shrunk.add(b.plan.shareKey);
    b.sent = s;
    return { b, s };
  }

  /** After a send: the share keys whose rate went down are re-assigned, now that Envoy has been told. */
  private confirmShrinks(): void {
    const keys = [...this.shrunk];
    this.shrunk.clear();
    for (const key of keys) this.pushed(key);
  }

  /** Watches the share keys of the buckets held now, and no others. */
  private rewatch(): void {
    const keys = this.buckets!.shareKeys();
    for (const [key, stop] of this.watching) {
      if (keys.has(key)) continue;
      stop();
      this.watching.delete(key);
    }
    for (const key of keys)
      if (!this.watching.has(key))
        this.watching.set(
          key,
          this.deps.quota.watch(key, (k) => this.pushed(k)),
        );
  }

  /** A grant of a bucket this stream holds moved (another instance's, or this stream's own lowered rate once
   * sent): re-assigned in turn with the reports, every key moved meanwhile together, a slice at a time. */
  private pushed(key: string): void {
    if (this.ended) return;
    this.pushing.add(key);
    if (this.pushing.size === 1) this.enqueue(() => this.metered(() => this.reassignPushed()));
  }

  private async reassignPushed(): Promise<void> {
    const keys = [...this.pushing];
    this.pushing.clear(); // a move while this runs is another re-assignment after it
    const buckets = keys.flatMap((k) => this.buckets!.withShareKey(k));
    for (const idx of sliceByShareKey(buckets.map((b) => b.plan.shareKey))) {
      if (!(await this.nextSlice())) return;
      await this.reassign(idx.map((i) => buckets[i]!));
    }
    this.confirmShrinks();
  }

  /** Sends the buckets whose strategy changed; a store failure leaves them as they are. */
  private async reassign(buckets: readonly StreamBucket[]): Promise<void> {
    if (this.ended || buckets.length === 0) return;
    const usages = buckets.map((b) => ({ plan: b.plan, allowed: 0, demand: b.demand, running: b.sent ? rateOf(b.sent) : 0 }));
    const { strategies } = await this.deps.quota.assign(this.claimed, usages, true);
    if (this.ended) return;
    const changed = buckets.flatMap((b, i) => {
      const s = strategies[i];
      return !s || sameStrategy(b.sent, s) ? [] : [this.told(b, s)];
    });
    if (changed.length > 0) this.send(changed, [], []);
  }

  /** Sends the buckets assigned, and the ones overflowing (ALLOW_ALL) and abandoned, in messages of bounded size. */
  private send(assigned: readonly Assigned[], abandon: readonly WireBucketId[], overflow: readonly WireBucketId[]): void {
    if (this.ended) return;
    const ttl = { seconds: this.deps.quota.ttlSeconds };
    const actions = assigned.map(({ b, s }) => assignAction(b.id, s, ttl));
    for (const id of overflow) actions.push(assignAction(id, ALLOW, ttl));
    for (const id of abandon) actions.push(abandonAction(id));
    if (this.deps.metrics) countActions(this.deps.metrics, this.label(), tally(assigned, overflow.length, abandon.length));
    for (const message of responses(actions)) this.stream.write(message);
  }

  /** The domain as a metric label. */
  private label(): string {
    return this.deps.domainLabel(this.domain!);
  }

  private observeRead(read: ReadReport): void {
    if (this.deps.metrics) countRead(this.deps.metrics, this.label(), read);
    if (read.refused.too_many_buckets > 0 && !this.boundLogged) {
      this.boundLogged = true;
      this.deps.logger.warn(
        { instance: this.claimed, limit: this.deps.limits.maxBuckets },
        'rlqs stream past its bucket bound: new buckets in use get ALLOW_ALL, idle ones are abandoned (logged once per stream)',
      );
    }
  }

  /** The stream ended: its watches stop, its instance and its buckets are given back. */
  close(): void {
    this.ended = true;
    for (const stop of this.watching.values()) stop();
    this.watching.clear();
    this.release?.();
    this.buckets?.release();
  }
}
