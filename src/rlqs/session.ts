import * as grpc from '@grpc/grpc-js';
import type { Logger } from 'pino';
import type { StoreUnavailableError } from '../errors.js';
import type { RlqsMetrics, RlqsStreamError } from '../metrics/rlqs-metrics.js';
import { type AssignmentSummary, MAX_RULES } from '../response/assignment-summary.js';
import { tooLong } from '../rls/request.js';
import { type BucketBudget, type RlqsBoundSettings, RlqsBounds } from './bounds.js';
import { AnswerSlots, CpuShare, Meter } from './cpu.js';
import { decodeUsageReports, peekDomain } from './decode.js';
import type { InstanceRegistry } from './identity.js';
import { RareLines } from './log.js';
import type { QuotaService } from './quota/quota-service.js';
import { ALLOW, firstBucket, rateOf, type Strategy, sameStrategy, wireStrategy } from './quota/strategy.js';
import { addRead, emptyRead, SLICE, sliceByShareKey, slicesOf } from './slices.js';
import { type ReadReport, type StreamBucket, StreamBuckets, type StreamLimits, type WireBucketId, type WireUsage } from './stream-buckets.js';
import { UnansweredReports } from './unanswered.js';

/** envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas: one stream per Envoy instance
 * and domain. Each usage report is answered with an action for every bucket it named: the bucket's token bucket
 * (or blanket rule), with a TTL of a few report intervals, re-sent every report so Envoy keeps its tokens and
 * restarts the TTL; abandon_action for buckets idle too long or past the stream's bound. Reports of one stream are
 * answered in order, one at a time. Nothing a client sends reaches a log line or a metric label but as a length,
 * a count or a fingerprint. */

export interface RlqsDeps {
  quota: QuotaService;
  instances: InstanceRegistry;
  limits: StreamLimits;
  /** What all streams together may hold and spend (rlqs-bounds.ts, rlqs-cpu.ts); defaults when left out. */
  process?: RlqsProcessLimits;
  logger: Logger;
  metrics?: RlqsMetrics;
  /** The domain's name as a metric label: configured domains only. */
  domainLabel: (domain: string) => string;
  /** Called with what each report was answered with (decision log, traces), and when it began. */
  onAssigned?: (a: AssignmentSummary, startMs: number) => void;
}

interface Assigned {
  b: StreamBucket;
  s: Strategy;
}

type Tally = AssignmentSummary['strategies'];

/** The actions of one answer by strategy, as the metric and the summary count them. */
function tally(assigned: readonly Assigned[], overflow: number, abandon: number): Tally {
  const counts = { token_bucket: 0, allow_all: overflow, deny_all: 0, abandon };
  for (const { s } of assigned) counts[STRATEGY_LABEL[s.kind]]++;
  return counts;
}

/** What domainLabel() answers for a domain no config names. */
export const UNKNOWN_DOMAIN = '(unknown)';
const STRATEGY_LABEL = { bucket: 'token_bucket', allow: 'allow_all', deny: 'deny_all' } as const;

export interface RlqsProcessLimits extends RlqsBoundSettings {
  /** The share of the process's time RLQS work may take (RLQS_CPU_SHARE). */
  cpuShare: number;
}

const DEFAULT_PROCESS_LIMITS: RlqsProcessLimits = { maxStreams: 10_000, maxBuckets: 50_000, cpuShare: 0.25 };

/** Bytes of reports one stream may have read and not yet answered: past it, the stream is not read until its
 * next answer (HTTP/2 flow control holds its client back; `too_many_reports` counts each time). Envoy sends one
 * every 5 s, and a new bucket's first at once; reports that come faster wait for the stream's next answer and
 * are answered together (coalesced). */
const MAX_PENDING_BYTES = 1024 * 1024;
/** Bytes of reports waiting in the whole process: past it, a stream that receives one is not read further until
 * its next answer. */
const MAX_PENDING_BYTES_IN_ALL = 64 * 1024 * 1024;
/** Answers in a row that may find a stream held back before it is ended with RESOURCE_EXHAUSTED: a burst is
 * coalesced, a sustained flood is not served (its every answer would be the most work a stream can ask for). */
const MAX_HELD_IN_A_ROW = 3;
/** How long an ending stream's answers may take before it ends with what is left unanswered. */
const END_GRACE_MS = 2000;
/** A stream's answers begin at least this share of the report interval apart (1 s at Envoy's 5 s). */
const MIN_GAP_SHARE = 0.2;
/** Answer messages the client has not read when the next answer is due: past this, it is not reading, and the
 * stream is ended. One answer is at most a report's buckets over ACTIONS_PER_MESSAGE messages (a report is
 * bounded by the 4 MiB message limit), so what a stream holds unsent stays bounded too. */
const MAX_UNREAD_MESSAGES = 32;
/** Report intervals with no message after which a stream is ended. */
const SILENT_REPORTS = 3;
/** Actions in one response message, so one answer never nears a 4 MiB message limit. */
const ACTIONS_PER_MESSAGE = 10_000;

type Call = grpc.ServerDuplexStream<unknown, unknown>;

export interface RlqsServer {
  implementation: grpc.UntypedServiceImplementation;
  /** Ends every open stream with OK once its answers are written (shutdown): each Envoy reopens its stream on its
   * next report, to a replica still serving, and keeps its assignments meanwhile. */
  drain(): void;
}

export function rlqsService(rlqs: RlqsDeps): RlqsServer {
  const open = new Set<QuotaStream>();
  const limits = rlqs.process ?? DEFAULT_PROCESS_LIMITS;
  const lines = new RareLines(rlqs.logger);
  const deps: StreamDeps = {
    ...rlqs,
    unanswered: new UnansweredReports(lines, rlqs.metrics),
    lines,
    bounds: new RlqsBounds(limits),
    cpu: new CpuShare(limits.cpuShare),
    slots: new AnswerSlots(),
    pending: { bytes: 0 },
  };
  const implementation = {
    StreamRateLimitQuotas: (call: Call) => {
      // Counted as it opens, before anything is read: a stream that never sends a message holds a place too.
      const admitted = deps.bounds.openStream(call.getPeer());
      if ('refused' in admitted) {
        refuse(call, deps, admitted.refused);
        return;
      }
      const stream = new QuotaStream(call, deps, deps.bounds.bucketBudget(call.getPeer()), () => {
        open.delete(stream);
        admitted.release();
      });
      open.add(stream);
      stream.start();
    },
  };
  deps.metrics?.measure(() => {
    let buckets = 0;
    for (const s of open) buckets += s.size;
    return { streams: open.size, buckets };
  });
  const drain = (): void => {
    for (const s of [...open]) s.drain();
  };
  return { implementation, drain };
}

/** Messages a paused stream may still have read ahead: one, not Node's 16 for object streams, so a stream held
 * back (see received()) holds at most one message it has not taken, whatever the size of its messages. */
function readAhead(call: Call, messages: number): void {
  const state = (call as unknown as { _readableState?: { highWaterMark: number } })._readableState;
  if (state && typeof state.highWaterMark === 'number') state.highWaterMark = messages;
}

/** What every stream shares: the deps, the count of reports the store left unanswered, the log lines a client
 * can cause (one a minute each), the bounds, RLQS's share of the process, and the bytes of reports waiting. */
type StreamDeps = RlqsDeps & {
  unanswered: UnansweredReports;
  lines: RareLines;
  bounds: RlqsBounds;
  cpu: CpuShare;
  slots: AnswerSlots;
  pending: { bytes: number };
};

/** A stream past the stream bounds, ended at once with RESOURCE_EXHAUSTED: nothing of it is read or kept. */
function refuse(call: Call, deps: StreamDeps, why: 'address' | 'connection' | 'total'): void {
  deps.metrics?.streamErrors.inc({ reason: 'too_many_streams' });
  deps.lines.note('info', 'too_many_streams', { reason: 'too_many_streams', bound: why }, 'rlqs stream refused: too many streams open');
  call.on('error', () => undefined);
  call.pause();
  const details = `too many RLQS streams open from this ${why === 'total' ? 'replica' : why}`;
  call.emit('error', Object.assign(new Error(details), { code: grpc.status.RESOURCE_EXHAUSTED, details }));
}

class QuotaStream {
  private domain: string | undefined;
  private instance = '';
  private release: (() => void) | undefined;
  private buckets: StreamBuckets | undefined;
  private queue: Promise<void> = Promise.resolve();
  /** Reports read and not yet answered (raw: decoded when their turn comes), and when the last answer began. */
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private lastAnswerMs = -Infinity;
  /** Not read (paused) until the reports waiting are answered. */
  private held = false;
  private answering = false;
  /** Answers in a row that found the stream held back (over MAX_PENDING_BYTES waiting). */
  private heldInARow = 0;
  /** Ending (finish()): what waits is answered without waiting out the gap. */
  private closing = false;
  /** What the work under way has spent of RLQS's share (metered()). */
  private meter: Meter;
  private ended = false;
  private boundLogged = false;
  /** Share keys this stream watches for moves (QuotaService.watch), and the re-assignments waiting. */
  private readonly watching = new Map<string, () => void>();
  private readonly pushing = new Set<string>();
  /** Share keys whose rate this stream lowered in the answer being sent (see told()). */
  private readonly shrunk = new Set<string>();
  private lastMessageMs = Date.now();
  private silence: NodeJS.Timeout | undefined;

  constructor(
    private readonly call: Call,
    private readonly deps: StreamDeps,
    private readonly budget: BucketBudget,
    private readonly onClosed: () => void,
  ) {
    this.meter = new Meter(deps.cpu);
  }

  /** Buckets this stream holds. */
  get size(): number {
    return this.buckets?.size ?? 0;
  }

  drain(): void {
    this.finish();
  }

  start(): void {
    readAhead(this.call, 1);
    // Envoy reports every interval, idle or not: a stream silent for three is a connection that died without a
    // close (no FIN), or a client that stopped. Ended, it releases its instance, whose entries then expire.
    const every = this.deps.limits.reportIntervalMs;
    this.silence = setInterval(() => {
      // Judged after this turn has read the sockets (setImmediate runs after the poll phase): a process too busy
      // to read for a while must not take the messages it has not read yet for a client's silence.
      setImmediate(() => {
        // A stream with reports waiting or being answered is not silent: its client is waiting for us.
        if (this.ended || this.answering || this.pending.length > 0 || Date.now() - this.lastMessageMs <= SILENT_REPORTS * every) return;
        this.deps.metrics?.streamErrors.inc({ reason: 'silent' });
        this.finish();
      });
    }, every);
    this.silence.unref();
    this.call.on('data', (m: unknown) => this.received(m));
    this.call.on('end', () => this.finish());
    this.call.on('error', () => this.close());
    this.call.on('close', () => this.close());
  }

  /** A report as it came (proto.ts leaves RLQS messages undecoded), kept until its turn. Past the bytes a stream
   * or the process may hold waiting, the stream is not read until its next answer: its client is held back by
   * HTTP/2 flow control, so reports sent faster than they are answered cost neither memory nor time here. */
  private received(m: unknown): void {
    if (this.ended) return;
    this.lastMessageMs = Date.now();
    const raw = m as Buffer;
    const domain = peekDomain(raw);
    if (domain === undefined) {
      this.fail('undecodable', grpc.status.INVALID_ARGUMENT, 'a message is not a RateLimitQuotaUsageReports');
      return;
    }
    if (!this.opened(domain)) return;
    this.pending.push(raw);
    this.pendingBytes += raw.length;
    this.deps.pending.bytes += raw.length;
    if (this.pending.length === 1) this.enqueue(() => this.answerPending());
    if (!this.held && (this.pendingBytes >= MAX_PENDING_BYTES || this.deps.pending.bytes >= MAX_PENDING_BYTES_IN_ALL)) {
      this.held = true;
      this.call.pause();
      this.deps.metrics?.streamErrors.inc({ reason: 'too_many_reports' });
      this.deps.lines.note('info', 'too_many_reports', { reason: 'too_many_reports' }, 'rlqs stream held back: reports come faster than they are answered');
    }
  }

  /** Answers what is waiting, in one answer: no sooner than the stream's gap after its last one, and when RLQS's
   * share of the process allows (rlqs-cpu.ts). Reports that came meanwhile are answered together. */
  private async answerPending(): Promise<void> {
    this.answering = true;
    const gapMs = MIN_GAP_SHARE * this.deps.limits.reportIntervalMs;
    const wait = this.closing ? 0 : this.lastAnswerMs + gapMs - Date.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait).unref());
    const release = await this.deps.slots.take();
    try {
      await this.metered(() => this.answerWaiting());
    } finally {
      release();
      this.answering = false;
      this.lastMessageMs = Math.max(this.lastMessageMs, Date.now()); // silence is counted from the last answer
    }
  }

  /** Decodes what waits (one message a turn) and answers it; past twice the bucket bound of usages, the rest of
   * the messages are not decoded (`too_many_reports`). */
  private async answerWaiting(): Promise<void> {
    await this.nextSlice(false);
    const raws = this.pending;
    this.pending = [];
    this.deps.pending.bytes -= this.pendingBytes;
    this.pendingBytes = 0;
    if (this.ended) return;
    this.heldInARow = this.held ? this.heldInARow + 1 : 0;
    if (this.heldInARow >= MAX_HELD_IN_A_ROW) {
      // Past what any Envoy sends (a report every interval, a small one per new bucket): a flood, ended as such.
      this.fail('too_many_reports', grpc.status.RESOURCE_EXHAUSTED, `reports came faster than answered ${MAX_HELD_IN_A_ROW} answers in a row`);
      return;
    }
    if (this.held) {
      this.held = false;
      this.call.resume();
    }
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
        this.fail('undecodable', grpc.status.INVALID_ARGUMENT, 'a message is not a RateLimitQuotaUsageReports');
        return;
      }
      for (const u of msg.bucket_quota_usages) usages.push(u); // its domain was checked as it came (received())
    }
    this.lastAnswerMs = Date.now();
    await this.answer(usages);
  }

  /** Reports and re-assignments run one at a time, in order. Whatever one throws that it did not expect (a
   * bug) ends this stream with INTERNAL, logged by class: never an unhandled rejection. */
  private enqueue(work: () => Promise<void>): void {
    this.queue = this.queue.then(work).catch((err: unknown) => {
      this.deps.logger.error({ err: (err as Error)?.constructor?.name, instance: this.instance }, 'rlqs stream failed on an internal error; ended');
      this.fail('internal', grpc.status.INTERNAL, 'internal error');
    });
  }

  /** The first message names the domain; a later one may repeat it (Envoy's does) but not change it. */
  private opened(domain: string): boolean {
    if (this.domain === undefined) {
      if (domain === '') {
        this.fail('no_domain', grpc.status.INVALID_ARGUMENT, 'the first report names no domain');
        return false;
      }
      if (tooLong(domain, this.deps.limits.bounds.maxValueBytes)) {
        this.fail('bad_domain', grpc.status.INVALID_ARGUMENT, `the domain is longer than ${this.deps.limits.bounds.maxValueBytes} bytes`);
        return false;
      }
      const claim = this.deps.instances.claim(domain, this.call.getPeer());
      this.domain = domain;
      this.instance = claim.instance;
      this.release = claim.release;
      this.buckets = new StreamBuckets(this.deps.limits, (id) => this.deps.quota.plan(domain, id), this.budget);
      return true;
    }
    if (domain !== '' && domain !== this.domain) {
      this.fail(
        'domain_changed',
        grpc.status.INVALID_ARGUMENT,
        `the domain changed mid-stream (a ${domain.length}-character one after a ${this.domain.length}-character one)`,
      );
      return false;
    }
    return true;
  }

  /** Answers a report in slices (rlqs-slices.ts): its buckets read, then assigned and sent a slice at a time, each
   * in its turn of RLQS's share of the process, so RLS decisions are served between them. */
  private async answer(usages: readonly WireUsage[]): Promise<void> {
    if (this.ended) return;
    // With the store known down no bucket can be answered: the report is counted, not read (planning thousands
    // of buckets for nothing would be the most work a process whose Redis froze does).
    const down = this.deps.quota.unavailable();
    if (down) {
      this.deps.unanswered.report(down, this.instance);
      return;
    }
    // Messages of earlier answers still unsent: Envoy reads its answers long before its next report.
    if (this.call.writableLength >= MAX_UNREAD_MESSAGES) {
      this.fail('not_reading', grpc.status.RESOURCE_EXHAUSTED, `the client left ${this.call.writableLength} answer messages unread`);
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
    if (failure) this.deps.unanswered.report(failure, this.instance);
    if (this.ended) return;
    for (const [n, ids] of slicesOf(read.overflow).entries()) if (n === 0 || (await this.nextSlice())) this.send([], [], ids);
    for (const [n, ids] of slicesOf(read.abandon).entries()) if (n === 0 || (await this.nextSlice())) this.send([], ids, []);
    this.confirmShrinks();
    this.rewatch();
    this.deps.onAssigned?.(this.summary(read, sent, failure?.constructor.name), startMs);
  }

  /** Assigns and sends the buckets read, a slice at a time. A bucket the store could not answer gets nothing:
   * its Envoy keeps what it has until its TTL. */
  private async assignSlices(read: ReadReport, yieldFirst: boolean): Promise<{ sent: Assigned[]; failure?: StoreUnavailableError }> {
    const sent: Assigned[] = [];
    let failure: StoreUnavailableError | undefined;
    for (const [n, idx] of sliceByShareKey(read.buckets.map((b) => b.plan.shareKey)).entries()) {
      if ((n > 0 || yieldFirst) && !(await this.nextSlice())) break;
      const assigned = await this.deps.quota.assign(
        this.instance,
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

  /** The buckets that got a strategy, with what they are told (a first token bucket's burst held down). */
  private assigned(buckets: readonly StreamBucket[], strategies: readonly (Strategy | undefined)[]): Assigned[] {
    return buckets.flatMap((b, i) => {
      const s = strategies[i];
      return s ? [this.told(b, firstBucket(s, b.sent))] : [];
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
    const { strategies } = await this.deps.quota.assign(this.instance, usages, true);
    if (this.ended) return;
    const changed = buckets.flatMap((b, i) => {
      const s = strategies[i] && firstBucket(strategies[i], b.sent);
      return !s || sameStrategy(b.sent, s) ? [] : [this.told(b, s)];
    });
    if (changed.length > 0) this.send(changed, [], []);
  }

  private send(assigned: readonly Assigned[], abandon: readonly WireBucketId[], overflow: readonly WireBucketId[]): void {
    if (this.ended) return;
    const ttl = { seconds: this.deps.quota.ttlSeconds };
    const assign = (id: WireBucketId, s: Strategy) => ({
      bucket_id: { bucket: id },
      quota_assignment_action: { assignment_time_to_live: ttl, rate_limit_strategy: wireStrategy(s) },
    });
    const actions: unknown[] = assigned.map(({ b, s }) => assign(b.id, s));
    for (const id of overflow) actions.push(assign(id, ALLOW));
    for (const id of abandon) actions.push({ bucket_id: { bucket: id }, abandon_action: {} });
    this.countActions(tally(assigned, overflow.length, abandon.length));
    for (let i = 0; i < actions.length; i += ACTIONS_PER_MESSAGE) this.call.write({ bucket_action: actions.slice(i, i + ACTIONS_PER_MESSAGE) });
  }

  /** What the span and the decision-log line of this answer say (response/assignment-summary.ts). */
  private summary(read: ReadReport, sent: readonly Assigned[], failure: string | undefined): AssignmentSummary {
    const denyRules = new Set<string>();
    for (const { b, s } of sent) if (s.kind === 'deny' && b.plan.rule && denyRules.size < MAX_RULES) denyRules.add(b.plan.rule.id);
    const domain = this.deps.domainLabel(this.domain!);
    return {
      domain: domain === UNKNOWN_DOMAIN ? undefined : domain,
      instance: this.instance,
      buckets: read.buckets.length + read.abandon.length + read.overflow.length,
      allowed: read.allowed,
      denied: read.denied,
      strategies: tally(sent, read.overflow.length, read.abandon.length),
      denyRules: [...denyRules],
      ...(failure && { failure }),
    };
  }

  private countActions(counts: Tally): void {
    const m = this.deps.metrics;
    if (!m) return;
    const domain = this.deps.domainLabel(this.domain!);
    for (const [strategy, n] of Object.entries(counts)) if (n > 0) m.assignments.inc({ domain, strategy }, n);
  }

  private observeRead(read: ReadReport): void {
    const m = this.deps.metrics;
    if (m) {
      const domain = this.deps.domainLabel(this.domain!);
      if (read.allowed > 0) m.reported.inc({ domain, result: 'allowed' }, read.allowed);
      if (read.denied > 0) m.reported.inc({ domain, result: 'denied' }, read.denied);
      for (const [reason, n] of Object.entries(read.refused)) if (n > 0) m.refused.inc({ reason }, n);
      if (read.idle > 0) m.refused.inc({ reason: 'idle' }, read.idle);
    }
    if (read.refused.too_many_buckets > 0 && !this.boundLogged) {
      this.boundLogged = true;
      this.deps.logger.warn(
        { instance: this.instance, limit: this.deps.limits.maxBuckets },
        'rlqs stream past its bucket bound: new buckets in use get ALLOW_ALL, idle ones are abandoned (logged once per stream)',
      );
    }
  }

  private fail(reason: RlqsStreamError, code: grpc.status, details: string): void {
    if (this.ended) return;
    this.deps.metrics?.streamErrors.inc({ reason });
    this.deps.lines.note('info', reason, { reason, instance: this.instance || undefined }, `rlqs stream ended: ${details}`);
    this.close();
    // grpc-js turns an 'error' into the call's status, sent after the answers already written; reading stops,
    // so a client past a bound is held back by HTTP/2 flow control instead of filling this process.
    this.call.pause();
    this.call.emit('error', Object.assign(new Error(details), { code, details }));
  }

  /** The client is done (or the replica drains): the stream ends with OK once what waits is answered, or after
   * END_GRACE_MS with the rest dropped, so an end never waits on RLQS's backlog (a report that is not one still
   * ends it with INVALID_ARGUMENT). */
  private finish(): void {
    if (this.closing) return;
    this.closing = true;
    const grace = setTimeout(() => this.endNow(), END_GRACE_MS).unref();
    this.queue.then(() => {
      clearTimeout(grace);
      if (!this.ended) this.call.end();
      this.close();
    });
  }

  private endNow(): void {
    if (this.ended) return;
    if (this.pending.some((raw) => decodeUsageReports(raw) === undefined)) {
      this.fail('undecodable', grpc.status.INVALID_ARGUMENT, 'a message is not a RateLimitQuotaUsageReports');
      return;
    }
    this.call.end();
    this.close();
  }

  private close(): void {
    if (this.ended) return;
    this.ended = true;
    clearInterval(this.silence);
    this.onClosed();
    for (const stop of this.watching.values()) stop();
    this.watching.clear();
    this.release?.();
    this.buckets?.release();
    this.deps.pending.bytes -= this.pendingBytes;
    this.pending = [];
    this.pendingBytes = 0;
  }
}
