import { existsSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import type { ConfigLimits } from './load.js';
import type { ReaderReply, ReaderRequest } from './reload-worker.js';

/** A reader thread failure, by code (TIMEOUT, OUT_OF_MEMORY, READER_FAILED, BUSY, STOPPED). */
export class ReaderError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** Parsing takes ~90 times a dense file's size in heap, and a file of many tiny nodes (a long flow sequence
 * of numbers) several hundred times: capped, such a file costs a rejected reload instead of the process. */
export function readerHeapMb(limits: ConfigLimits): number {
  return 128 * Math.ceil(limits.maxFileBytes / (1024 * 1024));
}

/** The reader thread, started on first use and again after it died; one request at a time (a config source
 * runs one reload at a time). */
export class ReaderThread {
  private worker: Worker | undefined;
  private pending: { resolve: (r: ReaderReply) => void; reject: (e: Error) => void } | undefined;
  private timer: NodeJS.Timeout | undefined;
  /** The set being parsed, once the thread has said: names a parse that killed the thread. */
  lastHash: string | undefined;

  constructor(
    private readonly heapMb: number,
    private readonly timeoutMs: number,
    /** The set is read and differs from the running one; parsing it may take a while. */
    private readonly onRead: (hash: string) => void,
  ) {}

  ask(req: ReaderRequest, transfer: ArrayBuffer[] = []): Promise<ReaderReply> {
    // A second request would take the first one's answer and leave the first waiting for ever.
    if (this.pending) return Promise.reject(new ReaderError('BUSY', 'the config reader is busy with another request'));
    if (req.type === 'read') this.lastHash = undefined;
    this.worker ??= this.spawn();
    const worker = this.worker;
    return new Promise((resolve, reject) => {
      this.pending = { resolve, reject };
      this.timer = setTimeout(() => this.kill(new ReaderError('TIMEOUT', `not read and parsed within ${this.timeoutMs / 1000} s`)), this.timeoutMs);
      this.timer.unref();
      worker.postMessage(req, transfer);
    });
  }

  close(): void {
    this.kill(new ReaderError('STOPPED', 'stopped'));
  }

  private spawn(): Worker {
    const w = new Worker(readerScript(), { resourceLimits: { maxOldGenerationSizeMb: this.heapMb } });
    w.unref(); // never what keeps the process running
    w.on('message', (reply: ReaderReply) => {
      if (this.worker !== w) return; // a stopped thread's late answer is not the pending request's
      if (reply.type !== 'hashed') return this.settle(undefined, reply);
      this.lastHash = reply.hash;
      this.onRead(reply.hash);
    });
    w.on('error', (err: Error & { code?: string }) => {
      if (this.worker !== w) return;
      this.kill(
        err.code === 'ERR_WORKER_OUT_OF_MEMORY'
          ? new ReaderError('OUT_OF_MEMORY', `parsing needs more than the config reader's ${this.heapMb} MB of memory`)
          : new ReaderError('READER_FAILED', `the config reader failed: ${err.message}`),
      );
    });
    w.on('exit', (code) => {
      // A thread that was stopped (kill) has already settled its request; the one now pending is its successor's.
      if (this.worker !== w) return;
      this.worker = undefined;
      this.settle(new ReaderError('READER_FAILED', `the config reader exited (code ${code})`));
    });
    return w;
  }

  private kill(err: Error): void {
    const w = this.worker;
    this.worker = undefined;
    void w?.terminate();
    this.settle(err);
  }

  private settle(err: Error | undefined, reply?: ReaderReply): void {
    clearTimeout(this.timer);
    const p = this.pending;
    this.pending = undefined;
    if (err) p?.reject(err);
    else if (reply) p?.resolve(reply);
  }
}

/** The compiled reader script. Beside this file once built (dist/config/); under vitest, which runs the
 * TypeScript sources, from dist/ (npm test builds first), since a Worker cannot load .ts. */
function readerScript(): URL {
  const candidates = [new URL('./reload-worker.js', import.meta.url), new URL('../../dist/config/reload-worker.js', import.meta.url)];
  const found = candidates.find((u) => existsSync(u));
  if (!found) throw new ReaderError('READER_FAILED', `config reader script not found (${candidates.map((u) => u.pathname).join(', ')}): run npm run build`);
  return found;
}
