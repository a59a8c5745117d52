import { type FSWatcher, watch } from 'node:fs';
import type { Logger } from 'pino';
import type { CompiledConfig } from './compiled.js';
import { ConfigError, type ConfigProblem, fileProblem, formatProblem } from './errors.js';
import type { ConfigLimits } from './load.js';
import { ConfigPipeline } from './pipeline.js';
import type { ConfigDiff } from './rule-diff.js';

export type { ConfigDiff } from './rule-diff.js';

export type ReloadOutcome = 'unchanged' | 'reloaded' | 'rejected';

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

/** Reloads the config directory when it changes, including a Kubernetes ConfigMap's `..data` symlink swap
 * (a rename in the directory, seen by fs.watch and, failing that, by the poll), through the config pipeline
 * (pipeline.ts). A bad set, an unreadable directory or one emptied of every domain is reported once and the
 * running config stays. */
export class ConfigWatcher {
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
  private readonly pipeline: ConfigPipeline;

  constructor(private readonly opts: WatcherOptions) {
    this.pipeline = new ConfigPipeline(opts.current, opts.limits, opts.logger);
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
    this.pipeline.close();
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
    const { dir, limits } = this.opts;
    const skip = [this.pipeline.current.hash, ...(this.rejected === undefined ? [] : [this.rejected])];
    const reply = await this.pipeline.read({ kind: 'dir', dir }, limits, skip, dir);
    if (this.stopped) return 'unchanged';
    this.followDirectory(reply.dirId);
    if (reply.type === 'unchanged') return this.unchanged(reply.hash);
    if (reply.type === 'invalid') return this.reject(reply.hash, reply.problems);
    if (reply.domains === 0 && this.pipeline.current.domains.size > 0) {
      // Deleting every file is far more often an accident (a bad deploy, an unmounted volume) than a wish to
      // admit every request: keep enforcing until a config with at least one domain arrives.
      return this.reject(reply.hash, [fileProblem(dir, 'EMPTY', 'no descriptor config left (no .yaml or .yml file): refusing to drop every limit')]);
    }
    const swapped = await this.pipeline.swapIn(reply.hash, reply.slices, dir);
    if (this.stopped) return 'unchanged';
    if (swapped.type === 'invalid') return this.reject(reply.hash, swapped.problems);
    this.rejected = undefined;
    this.opts.onReload(swapped.next, swapped.previous, swapped.diff);
    return 'reloaded';
  }

  private reject(key: string | undefined, problems: ConfigProblem[]): ReloadOutcome {
    const id = key ?? problems.map(formatProblem).join('\n');
    if (id === this.rejected) return 'unchanged';
    this.rejected = id;
    this.opts.onFailure(new ConfigError(problems));
    return 'rejected';
  }

  private unchanged(hash: string): ReloadOutcome {
    if (hash === this.pipeline.current.hash && this.rejected !== undefined) {
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
