import type { Http2Session, IncomingHttpHeaders, ServerHttp2Stream } from 'node:http2';
import { performance } from 'node:perf_hooks';
import { timeoutMs } from './h2-unary.js';
import { RESET_BURST, RESET_RATE } from './port-bounds.js';

/** Stream resets from a client, told apart (docs/security.md, "Stream resets"):
 *  late   a stream reset once at least half its client's own deadline (grpc-timeout) has passed, as Envoy resets
 *         every call at its filter timeout: never counted, however many, so a replica that stalls past Envoy's
 *         timeout keeps Envoy's connection. Half: a busy replica reads a stream's headers late and its reset less
 *         late, so the age it sees falls short of the client's; a client holding each stream that long opens no
 *         more than a client that waits for its answers;
 *  rapid  any other (HTTP/2 rapid reset: a stream opened and reset before its client could have given up): a
 *         burst of RESET_BURST, then RESET_RATE a second, per connection; past it the connection is ended.
 * A stream's age is counted from when it was read, plus how long this process had not run when the loop turn that
 * read it began (a heartbeat every BEAT_MS tells): a stream Envoy sent while this process stalled is as old as
 * the stall, though it is read after. The stall is taken once a turn, at its first stream, and counted from the
 * end of the turn before that read streams: a client's own burst, however long it takes to read, never makes its
 * streams seem old. The turns that follow a stall's first with no idle moment between them (its backlog) carry
 * its stall: only a stall of this process is ever excused, for as long as its backlog is being read. */
const BEAT_MS = 5;
/** However short its deadline, a stream reset younger than this is rapid: a client naming a deadline of 1 ms
 * is not excused for resetting at once, nor by a pause of this process shorter than this. A stall that short
 * brings Envoy's resets well under the allowance's burst (25 ms at 4,000 calls a second: 100). */
const MIN_LATE_MS = 25;
/** A stream with no deadline is late once this old (a client that cancels a call it gave up on). */
const LATE_WITHOUT_DEADLINE_MS = 1000;

let lastBeatMs = performance.now();
let beat: NodeJS.Timeout | undefined;
/** How long this process had not run when the current loop turn read its first stream; undefined between turns. */
let turnStallMs: number | undefined;
/** Streams opened since start, on either server: whether any came is how heap-trim.ts tells a quiet process. */
let opened = 0;
/** The stall the last turn that read streams took its streams' age from, and when that turn ended. */
let carriedStallMs = 0;
let lastTurnEndMs = Number.NEGATIVE_INFINITY;
const endTurn = (): void => {
  turnStallMs = undefined;
  // The turn's own work is not a stall: the next turn's is counted from here.
  lastBeatMs = performance.now();
  lastTurnEndMs = lastBeatMs;
};

/** Starts the heartbeat the ages are read from (once a process; it never keeps the process alive). */
export function startResetClock(): void {
  if (beat) return;
  beat = setInterval(() => {
    lastBeatMs = performance.now();
  }, BEAT_MS);
  beat.unref();
}

const OPENED = Symbol('opened');
const DEADLINE = Symbol('deadline');
const SESSION = Symbol('session');
type Marked = ServerHttp2Stream & { [OPENED]?: number; [DEADLINE]?: string; [SESSION]?: Http2Session };

/** Marks a stream as it opens: when its client may have sent it, the deadline it named, its connection. */
export function noteOpened(stream: ServerHttp2Stream, headers: IncomingHttpHeaders): void {
  opened++;
  const s = stream as Marked;
  const now = performance.now();
  if (turnStallMs === undefined) {
    // A backlog after a stall is read over several turns, the loop never idle between them: the streams of the
    // turns straight after the first were sent during the same stall, and are as old as it (a 2 s stall's
    // later turns read their streams as new, and Envoy's late resets as rapid: 1 run of 4 lost its connection).
    const backlog = now - lastTurnEndMs <= BEAT_MS ? carriedStallMs : 0;
    turnStallMs = Math.max(backlog, now - lastBeatMs - BEAT_MS, 0);
    carriedStallMs = turnStallMs;
    setImmediate(endTurn);
  }
  s[OPENED] = now - turnStallMs;
  s[SESSION] = stream.session;
  const deadline = headers['grpc-timeout'];
  if (typeof deadline === 'string') s[DEADLINE] = deadline;
}

/** Streams opened on the gRPC port since start. */
export const streamsOpened = (): number => opened;

/** The connection a stream opened on (a closed stream no longer names it). */
export function openedOn(stream: ServerHttp2Stream): Http2Session | undefined {
  return (stream as Marked)[SESSION];
}

/** Whether a stream its client reset was reset late: at least half its own deadline old (see above). */
export function resetLate(stream: ServerHttp2Stream, nowMs = performance.now()): boolean {
  const s = stream as Marked;
  const opened = s[OPENED];
  if (opened === undefined) return false;
  const ageMs = nowMs - opened;
  const deadlineMs = timeoutMs(s[DEADLINE]);
  return ageMs >= Math.max(MIN_LATE_MS, (deadlineMs ?? LATE_WITHOUT_DEADLINE_MS) / 2);
}

/** A connection's allowance of rapid resets: a token bucket of RESET_BURST refilled at RESET_RATE a second. */
export class ResetAllowance {
  private tokens = RESET_BURST;
  private atMs: number;

  constructor(nowMs = performance.now()) {
    this.atMs = nowMs;
  }

  /** Takes one rapid reset; false when the allowance is spent (the connection is to end). */
  take(nowMs = performance.now()): boolean {
    this.tokens = Math.min(RESET_BURST, this.tokens + ((nowMs - this.atMs) / 1000) * RESET_RATE);
    this.atMs = nowMs;
    if (this.tokens < 1) return false;
    this.tokens--;
    return true;
  }
}
