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
/** A pause the heartbeat records as a stall of this process, at least: past what a flood of streams keeps the
 * loop busy for between heartbeats (the rapid-reset cases at a 1 ms deadline, 2 runs of 4 at any length), and
 * well under a stop that costs Envoy's connection (a 500 ms one did). */
const HEARTBEAT_STALL_MS = 200;
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
/** The last stall of this process: how long, and when the turn that found it began (its backlog's reading). */
let stallMs = 0;
let stallAtMs = Number.NEGATIVE_INFINITY;
/** When the current turn that read streams began, and this process's CPU time then (µs). */
let turnStartMs = 0;
let turnStartCpuUs = 0;
const endTurn = (): void => {
  turnStallMs = undefined;
  // The turn's own work is not a stall: the next turn's is counted from here. Time it did not run is: a stop
  // between its read and this end (a SIGSTOP, a CPU throttle) would otherwise be forgotten here.
  const now = performance.now();
  const cpu = process.cpuUsage();
  const notRunMs = now - turnStartMs - (cpu.user + cpu.system - turnStartCpuUs) / 1000;
  if (notRunMs >= HEARTBEAT_STALL_MS) noteStall(notRunMs, now);
  lastBeatMs = now;
  lastTurnEndMs = now;
};

/** Starts the heartbeat the ages are read from (once a process; it never keeps the process alive). */
export function startResetClock(): void {
  if (beat) return;
  beat = setInterval(() => {
    const now = performance.now();
    // A stall ends in whichever turn runs first, this one or a read of streams: either records it. Here only a
    // long one: a flood of streams keeps the loop busy between heartbeats too, and must not excuse itself.
    const gap = now - lastBeatMs - BEAT_MS;
    if (gap >= HEARTBEAT_STALL_MS) noteStall(gap, now);
    lastBeatMs = now;
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
    const cpu = process.cpuUsage();
    turnStartMs = now;
    turnStartCpuUs = cpu.user + cpu.system;
    turnStallMs = Math.max(backlogStall(now), 0);
    carriedStallMs = turnStallMs;
    setImmediate(endTurn);
  }
  s[OPENED] = now - turnStallMs;
  s[SESSION] = stream.session;
  const deadline = headers['grpc-timeout'];
  if (typeof deadline === 'string') s[DEADLINE] = deadline;
}

/** The stall the turn beginning now takes its streams' age from: this process's own pause before it, or the
 * backlog's of the last stall. A backlog is read over several turns: those straight after the stall's first
 * (the loop never idle between them) carry its stall whole (a 2 s stall's later turns read their streams as new,
 * and Envoy's late resets as rapid: 1 run of 4 lost its connection). On a busy machine other work comes between
 * them (CI lost the connection 42 ms after a 1 s stall ended, twice): a stream read t ms after the stall ended
 * was sent at least t ms before that if it was sent in the stall, so the stall carries, shortened by t, until it
 * is spent: never longer than the stall itself. And a stall is seen by whichever turn runs first after it: a
 * process stopped outside its wait for I/O runs its timers (this heartbeat) before it reads the backlog, which
 * then found no stall at all (2 runs of 3 lost the connection, old code and new alike, on 2026-12-02). */
function backlogStall(now: number): number {
  const own = now - lastBeatMs - BEAT_MS;
  const adjacent = now - lastTurnEndMs <= BEAT_MS ? carriedStallMs : 0;
  noteStall(own, now);
  return Math.max(own, adjacent, stallMs - (now - stallAtMs));
}

/** A pause of this process of `ms` ending `now`: the last stall, unless what is left of the one before is longer. */
function noteStall(ms: number, now: number): void {
  if (ms <= stallMs - (now - stallAtMs)) return;
  stallMs = ms;
  stallAtMs = now;
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
