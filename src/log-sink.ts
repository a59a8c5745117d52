import type { DestinationStream } from 'pino';

/** Log text held for a stdout that is not being read (a full pipe) before lines are dropped: the most memory
 * a stuck log reader can cost. */
export const MAX_PENDING_BYTES = 8 * 1024 * 1024;

type Output = NodeJS.WritableStream & { readonly writableLength: number };

/** Streams whose errors a sink handles: the CLI's own handler (which ends a command quietly on EPIPE) leaves
 * them alone, since a service must not stop because its log reader went away. */
const owned = new WeakSet<object>();
export const ownedByLogSink = (stream: object): boolean => owned.has(stream);

/** Where the service's log lines go: stdout through Node's own stream (libuv, non-blocking), never a write
 * that can hold the process or its exit. pino's default destination (sonic-boom) is not used: at exit it
 * flushes with `flushSync`, which retries EPIPE, EBADF and EAGAIN forever with 100 ms sleeps (sonic-boom
 * 4.2 index.js, flushSync: only EAGAIN/EBUSY are handed to retryEAGAIN, every other error sleeps and loops),
 * and its asynchronous writes run on libuv's thread pool, which process.exit joins: a blocking pipe that
 * nobody reads held SIGTERM forever either way (issue 36, item 4).
 * - a reader that went away (EPIPE) or a closed descriptor: the sink stops writing, says so once on stderr,
 *   and the service keeps serving;
 * - a full pipe nobody reads: up to MAX_PENDING_BYTES wait in memory, then lines are dropped and counted,
 *   and the count is reported once the reader catches up;
 * - exit: `flush(ms)` waits at most `ms` for what is queued; process.exit drops what is still queued. */
export class LogSink implements DestinationStream {
  private broken: string | undefined;
  private dropped = 0;

  constructor(
    private readonly out: Output = process.stdout,
    private readonly note: (text: string) => void = noteOnStderr,
  ) {
    owned.add(out);
    out.on('error', (err: NodeJS.ErrnoException) => this.fail(err));
    if (note === noteOnStderr) ownStderr();
  }

  write(line: string): void {
    if (this.broken !== undefined) return;
    if (this.out.writableLength >= MAX_PENDING_BYTES) {
      if (this.dropped++ === 0) this.note(`tollgate: stdout is not being read: ${MAX_PENDING_BYTES} bytes of log wait; log lines are dropped until it is\n`);
      return;
    }
    if (this.dropped > 0) {
      this.note(`tollgate: stdout is read again: ${this.dropped} log lines were dropped meanwhile\n`);
      this.dropped = 0;
    }
    try {
      this.out.write(line);
    } catch (err) {
      this.fail(err as NodeJS.ErrnoException); // a file's synchronous write (ENOSPC, EBADF) throws
    }
  }

  /** Resolves once every line written so far has left the process, the output broke, or `ms` passed; never
   * rejects. The empty write's callback runs after every write queued before it (they complete in order). */
  flush(ms: number): Promise<void> {
    if (this.broken !== undefined || this.out.writableLength === 0 || ms <= 0) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      try {
        this.out.write('', () => {
          clearTimeout(timer);
          resolve();
        });
      } catch {
        resolve();
      }
    });
  }

  private fail(err: NodeJS.ErrnoException): void {
    if (this.broken !== undefined) return;
    this.broken = err.code ?? 'error';
    this.note(`tollgate: stdout failed (${this.broken}): log lines are dropped from now on; serving goes on\n`);
  }
}

/** stderr's errors are taken too: a service never stops for a broken stderr (its own lines there, the
 * notes below and a start-up error, are lost then). */
function ownStderr(): void {
  if (owned.has(process.stderr)) return;
  owned.add(process.stderr);
  process.stderr.on('error', () => undefined);
}

/** A line on stderr, unless stderr is itself stuck or broken (it may be the same pipe as stdout). */
function noteOnStderr(text: string): void {
  const err = process.stderr;
  if (err.destroyed || err.writableLength >= 64 * 1024) return;
  try {
    err.write(text);
  } catch {
    // a file's synchronous write failed: nothing more to tell anyone
  }
}
