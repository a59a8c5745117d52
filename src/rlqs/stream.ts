import { type ServerDuplexStream, status } from '@grpc/grpc-js';
import type { RlqsStreamError } from '../metrics/rlqs-metrics.js';
import type { BucketBudget } from './bounds.js';
import { decodeUsageReports } from './decode.js';
import type { StreamDeps, StreamOutlet } from './deps.js';
import { INSTANCE_HEADER } from './identity.js';
import type { WireQuotaResponse } from './messages.js';
import { QuotaSession } from './session.js';

/** The transport of one RLQS stream (one Envoy instance and domain): it reads the grpc-js duplex call's messages
 * (data, end, error, close), holds its client back when reports come faster than they are answered (pause,
 * resume), writes the answers and ends the call with a status. What the messages mean, and what is answered,
 * is its session's (session.ts). Nothing a client sends reaches a log line or a metric label but as a length, a
 * count or a fingerprint. */

export type Call = ServerDuplexStream<unknown, unknown>;

/** Bytes of reports one stream may have read and not yet answered: past it, the stream is not read until its
 * next answer (HTTP/2 flow control holds its client back; `too_many_reports` counts each time). Envoy sends one
 * every 5 s, and a new bucket's first at once; reports that come faster wait for the stream's next answer and
 * are answered together (coalesced). */
const MAX_PENDING_BYTES = 1024 * 1024;
/** Bytes of reports waiting in the whole process: past it, a stream that receives one is not read further until
 * its next answer. */
const MAX_PENDING_BYTES_IN_ALL = 16 * 1024 * 1024;
/** Answers in a row that may find a stream held back before it is ended with RESOURCE_EXHAUSTED: a burst is
 * coalesced, a sustained flood is not served (its every answer would be the most work a stream can ask for). */
const MAX_HELD_IN_A_ROW = 3;
/** How long an ending stream's answers may take before it ends with what is left unanswered. */
const END_GRACE_MS = 2000;
/** Report intervals with no message after which a stream is ended. */
const SILENT_REPORTS = 3;

/** Messages a paused stream may still have read ahead: one, not Node's 16 for object streams, so a stream held
 * back (see received()) holds at most one message it has not taken, whatever the size of its messages. */
function readAhead(call: Call, messages: number): void {
  const state = (call as unknown as { _readableState?: { highWaterMark: number } })._readableState;
  if (state && typeof state.highWaterMark === 'number') state.highWaterMark = messages;
}

export class RlqsStream implements StreamOutlet {
  private readonly session: QuotaSession;
  /** Reports read and not yet answered (raw: decoded when their turn comes). */
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  /** Not read (paused) until the reports waiting are answered. */
  private held = false;
  /** Answers in a row that found the stream held back (over MAX_PENDING_BYTES waiting). */
  private heldInARow = 0;
  /** Ending (finish()): what waits is answered without waiting out the gap. */
  private closing = false;
  private ended = false;
  private lastMessageMs = Date.now();
  private silence: NodeJS.Timeout | undefined;

  constructor(
    private readonly call: Call,
    private readonly deps: StreamDeps,
    budget: BucketBudget,
    private readonly onClosed: () => void,
  ) {
    this.session = new QuotaSession(this, deps, budget);
  }

  get peer(): string {
    return this.call.getPeer();
  }

  /** The stream's INSTANCE_HEADER (identity.ts), if it carries one: its first value. */
  get instanceName(): string | undefined {
    const v = this.call.metadata.get(INSTANCE_HEADER)[0];
    return v === undefined ? undefined : String(v);
  }

  get ending(): boolean {
    return this.closing;
  }

  /** Buckets this stream holds. */
  get size(): number {
    return this.session.size;
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
        if (this.ended || this.session.answering || this.pending.length > 0 || Date.now() - this.lastMessageMs <= SILENT_REPORTS * every) return;
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

  /** A report as it came (server/proto.ts leaves RLQS messages undecoded), kept until its turn. Past the bytes a
   * stream or the process may hold waiting, the stream is not read until its next answer: its client is held back
   * by HTTP/2 flow control, so reports sent faster than they are answered cost neither memory nor time here. */
  private received(m: unknown): void {
    if (this.ended) return;
    this.lastMessageMs = Date.now();
    const raw = m as Buffer;
    if (!this.session.accepts(raw)) return;
    this.pending.push(raw);
    this.pendingBytes += raw.length;
    this.deps.pending.bytes += raw.length;
    if (this.pending.length === 1) this.session.enqueue(() => this.answerPending());
    if (!this.held && (this.pendingBytes >= MAX_PENDING_BYTES || this.deps.pending.bytes >= MAX_PENDING_BYTES_IN_ALL)) {
      this.held = true;
      this.call.pause();
      this.deps.metrics?.streamErrors.inc({ reason: 'too_many_reports' });
      this.deps.lines.note('info', 'too_many_reports', { reason: 'too_many_reports' }, 'rlqs stream held back: reports come faster than they are answered');
    }
  }

  private async answerPending(): Promise<void> {
    try {
      await this.session.answerPending();
    } finally {
      this.lastMessageMs = Math.max(this.lastMessageMs, Date.now()); // silence is counted from the last answer
    }
  }

  take(): Buffer[] {
    const raws = this.pending;
    this.pending = [];
    this.deps.pending.bytes -= this.pendingBytes;
    this.pendingBytes = 0;
    if (this.ended) return raws;
    this.heldInARow = this.held ? this.heldInARow + 1 : 0;
    if (this.heldInARow >= MAX_HELD_IN_A_ROW) {
      // Past what any Envoy sends (a report every interval, a small one per new bucket): a flood, ended as such.
      this.fail('too_many_reports', status.RESOURCE_EXHAUSTED, `reports came faster than answered ${MAX_HELD_IN_A_ROW} answers in a row`);
      return raws;
    }
    if (this.held) {
      this.held = false;
      this.call.resume();
    }
    return raws;
  }

  unread(): number {
    return this.call.writableLength;
  }

  write(message: WireQuotaResponse): void {
    this.call.write(message);
  }

  fail(reason: RlqsStreamError, code: status, details: string): void {
    if (this.ended) return;
    this.deps.metrics?.streamErrors.inc({ reason });
    this.deps.lines.note('info', reason, { reason, instance: this.session.instance || undefined }, `rlqs stream ended: ${details}`);
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
    this.session.settled().then(() => {
      clearTimeout(grace);
      if (!this.ended) this.call.end();
      this.close();
    });
  }

  private endNow(): void {
    if (this.ended) return;
    if (this.pending.some((raw) => decodeUsageReports(raw) === undefined)) {
      this.fail('undecodable', status.INVALID_ARGUMENT, 'a message is not a RateLimitQuotaUsageReports');
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
    this.session.close();
    this.deps.pending.bytes -= this.pendingBytes;
    this.pending = [];
    this.pendingBytes = 0;
  }
}
