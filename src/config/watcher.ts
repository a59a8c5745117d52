import { existsSync, watch, type FSWatcher } from 'node:fs';
import { Worker } from 'node:worker_threads';
import type { Logger } from 'pino';
import type { CompiledConfig, CompiledLimit, Rule } from './compiled.js';
import { ConfigError, fileProblem, formatProblem, type ConfigProblem } from './errors.js';
import { ConfigAssembler, type ConfigLimits } from './load.js';
import type { ReaderReply, ReaderRequest } from './reload-worker.js';

export type ReloadOutcome = 'unchanged' | 'reloaded' | 'rejected';

/** Rules by `domain/rule id`, as a reload's log line names them. */
export interface ConfigDiff {
  added: string[];
  removed: string[];
  changed: string[];
  /** `domain/rule per_<unit>`: limits moved between a window and a token bucket. A bucket has a key of its
   * own, so their counters start fresh (changing only a limit's numbers keeps them). */
  restarted: string[];
}

export interface WatcherOptions {
  dir: string;
  /** Safety net behind fs.watch, which misses events on some file systems: re-read this often. */
  pollMs: number;
  limits: ConfigLimits;
  current: CompiledConfig;
  logger: Logger;
  onReload: (next: CompiledConfig, previous: CompiledConfig, diff: ConfigDiff) => void;
  onFailure: (err: ConfigError) => void;
}

/** Longest a read and parse may take before the reader thread is stopped and the reload rejected. */
const READ_TIMEOUT_MS = 60_000;

/** Reloads the config directory when it changes, including a Kubernetes ConfigMap's `..data` symlink swap
 * (a rename in the directory, seen by fs.watch and, failing that, by the poll). Reading, parsing and
 * validating run on a reader thread; the main thread only compiles the result, in slices, so decisions keep
 * being answered during a reload of any size the limits admit. A bad set, an unreadable directory or one
 * emptied of every domain is reported once and the running config stays. */
export class ConfigWatcher {
  private current: CompiledConfig;
  private digest: RuleDigest;
  /** What the last rejection was about (the set's hash, or the read problems): reported once, not per poll. */
  private rejected: string | undefined;
  private dirId: string | undefined;
  private watcher: FSWatcher | undefined;
  private timer: NodeJS.Timeout | undefined;
  private debounce: NodeJS.Timeout | undefined;
  private started = false;
  private stopped = false;
  private running: Promise<ReloadOutcome> | undefined;
  private queued: Promise<ReloadOutcome> | undefined;
  private readonly reader: ReaderThread;

  constructor(private readonly opts: WatcherOptions) {
    this.current = opts.current;
    this.digest = ruleDigest(opts.current);
    this.reader = new ReaderThread(readerHeapMb(opts.limits), READ_TIMEOUT_MS, (hash) =>
      opts.logger.debug({ hash }, 'config directory changed: validating'),
    );
  }

  start(): void {
    this.started = true;
    this.watchDir();
    this.timer = setInterval(() => void this.check(), this.opts.pollMs);
    this.timer.unref();
  }

  stop(): void {
    this.stopped = true;
    this.unwatch();
    clearInterval(this.timer);
    clearTimeout(this.debounce);
    this.reader.close();
  }

  /** Reloads if the directory changed; resolves to what happened, for tests and logs. One reload runs at a
   * time: checks asked for during one run once after it (however many were asked), since the change that
   * prompted them may have come too late for the running one to see. A check asked for after a run ended
   * but before the queued one started joins the queued one: launching its own would run two reloads at
   * once, and the reader thread, which serves one request at a time, would leave one of them unanswered. */
  check(): Promise<ReloadOutcome> {
    if (this.queued) return this.queued;
    if (!this.running) return this.launch();
    this.queued = this.running.then(() => {
      this.queued = undefined;
      return this.launch();
    });
    return this.queued;
  }

  private launch(): Promise<ReloadOutcome> {
    const run: Promise<ReloadOutcome> = this.reload()
      .catch((err: unknown) => {
        // Only a throwing callback gets here; polls call check() unawaited, and a rejection would end the process.
        this.opts.logger.error({ err: (err as Error).message }, 'config reload failed');
        return 'rejected' as const;
      })
      .finally(() => {
        if (this.running === run) this.running = undefined;
      });
    this.running = run;
    return run;
  }

  private async reload(): Promise<ReloadOutcome> {
    if (this.stopped) return 'unchanged';
    const skip = [this.current.hash, ...(this.rejected === undefined ? [] : [this.rejected])];
    let reply: ReaderReply;
    try {
      reply = await this.reader.ask({ type: 'read', dir: this.opts.dir, limits: this.opts.limits, skip });
    } catch (err) {
      return this.stopped ? 'unchanged' : this.reject(this.reader.lastHash, [readerProblem(this.opts.dir, err)]);
    }
    if (this.stopped) return 'unchanged';
    if (reply.type === 'slice' || reply.type === 'hashed') return this.reject(undefined, [readerProblem(this.opts.dir, new Error(`unexpected ${reply.type} answer`))]);
    this.followDirectory(reply.dirId);
    if (reply.type === 'unchanged') return this.unchanged(reply.hash);
    if (reply.type === 'invalid') return this.reject(reply.hash, reply.problems);
    if (reply.domains === 0 && this.current.domains.size > 0) {
      // Deleting every file is far more often an accident (a bad deploy, an unmounted volume) than a wish to
      // admit every request: keep enforcing until a config with at least one domain arrives.
      return this.reject(reply.hash, [fileProblem(this.opts.dir, 'EMPTY', 'no descriptor config left (no .yaml or .yml file): refusing to drop every limit')]);
    }
    return this.swapIn(reply.hash, reply.slices);
  }

  private async swapIn(hash: string, slices: number): Promise<ReloadOutcome> {
    let next: { config: CompiledConfig; digest: RuleDigest };
    try {
      next = await this.assemble(hash, slices);
    } catch (err) {
      return this.stopped ? 'unchanged' : this.reject(hash, [readerProblem(this.opts.dir, err)]);
    }
    if (this.stopped) return 'unchanged';
    const previous = this.current;
    const diff = diffDigests(this.digest, next.digest);
    this.current = next.config;
    this.digest = next.digest;
    this.rejected = undefined;
    this.opts.onReload(next.config, previous, diff);
    return 'reloaded';
  }

  /** Asks for the slices one at a time: each costs the event loop a few milliseconds, and decisions waiting
   * in between are answered before the next (all at once, the copies alone would stall them). */
  private async assemble(hash: string, slices: number): Promise<{ config: CompiledConfig; digest: RuleDigest }> {
    const assembler = new ConfigAssembler();
    const digest: RuleDigest = new Map();
    for (let index = 0; index < slices; index++) {
      const reply = await this.reader.ask({ type: 'slice', index });
      if (reply.type !== 'slice' || reply.index !== index || !reply.spec) throw new Error(`expected slice ${index}, got ${reply.type}`);
      for (const rule of assembler.add(reply.spec)) digest.set(ruleKey(rule), digestOf(rule));
    }
    return { config: assembler.finish(hash), digest };
  }

  private reject(key: string | undefined, problems: ConfigProblem[]): ReloadOutcome {
    const id = key ?? problems.map(formatProblem).join('\n');
    if (id === this.rejected) return 'unchanged';
    this.rejected = id;
    this.opts.onFailure(new ConfigError(problems));
    return 'rejected';
  }

  private unchanged(hash: string): ReloadOutcome {
    if (hash === this.current.hash && this.rejected !== undefined) {
      this.rejected = undefined;
      this.opts.logger.info({ hash }, 'config directory matches the running config again');
    }
    return 'unchanged';
  }

  /** A directory deleted, or deleted and recreated, leaves fs.watch on the old one: follow the new one. */
  private followDirectory(dirId: string | undefined): void {
    if (dirId === this.dirId) return;
    const known = this.dirId !== undefined;
    this.dirId = dirId;
    if (!this.started || this.stopped) return;
    if (dirId === undefined) this.unwatch();
    else if (known || !this.watcher) this.watchDir();
  }

  private watchDir(): void {
    this.unwatch();
    try {
      const w = watch(this.opts.dir, () => this.soon());
      w.on('error', (err) => {
        this.opts.logger.warn({ err: err.message }, 'config watch failed; polling only');
        if (this.watcher === w) this.unwatch();
      });
      this.watcher = w;
    } catch (err) {
      this.opts.logger.warn({ err: (err as Error).message }, 'config watch unavailable; polling only');
    }
  }

  private unwatch(): void {
    this.watcher?.close();
    this.watcher = undefined;
  }

  /** Editors and ConfigMap updates touch several files in a burst: act once it settles. */
  private soon(): void {
    clearTimeout(this.debounce);
    this.debounce = setTimeout(() => void this.check(), 100);
    this.debounce.unref();
  }
}

/** Parsing takes ~90 times a dense file's size in heap, and a file of many tiny nodes (a long flow sequence
 * of numbers) several hundred times: capped, such a file costs a rejected reload instead of the process. */
function readerHeapMb(limits: ConfigLimits): number {
  return 128 * Math.ceil(limits.maxFileBytes / (1024 * 1024));
}

class ReaderError extends Error {
  constructor(readonly code: string, message: string) {
    super(message);
  }
}

function readerProblem(dir: string, err: unknown): ConfigProblem {
  if (err instanceof ReaderError) return fileProblem(dir, err.code, err.message);
  return fileProblem(dir, 'INTERNAL', `reload failed: ${(err as Error).message}`);
}

/** The reader thread, started on first use and again after it died; one request at a time (the watcher
 * runs one reload at a time). */
class ReaderThread {
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

  ask(req: ReaderRequest): Promise<ReaderReply> {
    // A second request would take the first one's answer and leave the first waiting for ever.
    if (this.pending) return Promise.reject(new ReaderError('BUSY', 'the config reader is busy with another request'));
    if (req.type === 'read') this.lastHash = undefined;
    const worker = (this.worker ??= this.spawn());
    return new Promise((resolve, reject) => {
      this.pending = { resolve, reject };
      this.timer = setTimeout(() => this.kill(new ReaderError('TIMEOUT', `not read and parsed within ${this.timeoutMs / 1000} s`)), this.timeoutMs);
      this.timer.unref();
      worker.postMessage(req);
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
      this.kill(err.code === 'ERR_WORKER_OUT_OF_MEMORY'
        ? new ReaderError('OUT_OF_MEMORY', `parsing needs more than the config reader's ${this.heapMb} MB of memory`)
        : new ReaderError('READER_FAILED', `the config reader failed: ${err.message}`));
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

/** Per rule: one line saying everything a reload can change about it, and the unit of each of its limits
 * that is a token bucket (a bucket's counter is not a window's). */
type RuleDigest = Map<string, { text: string; buckets: Set<string>; units: Set<string> }>;

const ruleKey = (r: Rule): string => `${r.domain}/${r.id}`;

const limitText = (l: CompiledLimit): string => `${l.requestsPerUnit}/${l.unit}${l.burst > 0 ? `:bucket${l.burst}` : l.algorithm === 'sliding_window' ? ':sliding' : ''}`;

function digestOf(r: Rule): { text: string; buckets: Set<string>; units: Set<string> } {
  const tiers = [...r.tierLimits].map(([t, ls]) => `${t}:${ls.map(limitText).join('+')}`);
  const limits = r.unlimited ? 'unlimited' : r.limits.map(limitText).join('+');
  const all = [...r.limits, ...[...r.tierLimits.values()].flat()];
  return {
    text: [limits, r.algorithm, r.shadow ? 'shadow' : '', r.quota ? 'quota' : '', r.variable.map((v) => (v ? 'v' : 'f')).join(''), r.metadata ? JSON.stringify(r.metadata) : '', ...tiers].join(' '),
    buckets: new Set(all.filter((l) => l.burst > 0).map((l) => l.unit)),
    units: new Set(all.map((l) => l.unit)),
  };
}

function ruleDigest(c: CompiledConfig): RuleDigest {
  const out: RuleDigest = new Map();
  for (const d of c.domains.values()) for (const r of d.rules) out.set(ruleKey(r), digestOf(r));
  return out;
}

/** A short account of what a reload changed, rule by rule. */
function diffDigests(a: RuleDigest, b: RuleDigest): ConfigDiff {
  const restarted: string[] = [];
  for (const [k, next] of b) {
    const was = a.get(k);
    if (!was) continue;
    for (const unit of next.units) {
      if (was.units.has(unit) && was.buckets.has(unit) !== next.buckets.has(unit)) restarted.push(`${k} per_${unit}`);
    }
  }
  return {
    added: [...b.keys()].filter((k) => !a.has(k)),
    removed: [...a.keys()].filter((k) => !b.has(k)),
    changed: [...b.keys()].filter((k) => a.has(k) && a.get(k)!.text !== b.get(k)!.text),
    restarted,
  };
}
