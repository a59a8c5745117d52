import { watch, type FSWatcher } from 'node:fs';
import type { Logger } from 'pino';
import type { CompiledConfig } from './compiled.js';
import { ConfigError } from './errors.js';
import { compileSources, hashSources, readConfigSources } from './load.js';

export interface WatcherOptions {
  dir: string;
  /** Safety net behind fs.watch, which misses events on some file systems: re-read this often. */
  pollMs: number;
  current: CompiledConfig;
  logger: Logger;
  onReload: (next: CompiledConfig, previous: CompiledConfig) => void;
  onFailure: (err: ConfigError) => void;
}

/** Reloads the config directory when it changes, including a Kubernetes ConfigMap's `..data` symlink swap
 * (a rename in the directory, seen by fs.watch and, failing that, by the poll). A bad set is reported once and
 * the running config stays. */
export class ConfigWatcher {
  private current: CompiledConfig;
  private lastSeenHash: string;
  private watcher: FSWatcher | undefined;
  private timer: NodeJS.Timeout | undefined;
  private debounce: NodeJS.Timeout | undefined;

  constructor(private readonly opts: WatcherOptions) {
    this.current = opts.current;
    this.lastSeenHash = opts.current.hash;
  }

  start(): void {
    try {
      this.watcher = watch(this.opts.dir, () => this.soon());
      this.watcher.on('error', (err) => this.opts.logger.warn({ err: err.message }, 'config watch failed; polling only'));
    } catch (err) {
      this.opts.logger.warn({ err: (err as Error).message }, 'config watch unavailable; polling only');
    }
    this.timer = setInterval(() => this.check(), this.opts.pollMs);
    this.timer.unref();
  }

  stop(): void {
    this.watcher?.close();
    clearInterval(this.timer);
    clearTimeout(this.debounce);
  }

  /** Editors and ConfigMap updates touch several files in a burst: act once it settles. */
  private soon(): void {
    clearTimeout(this.debounce);
    this.debounce = setTimeout(() => this.check(), 100);
    this.debounce.unref();
  }

  /** Reloads if the sources changed. Returns what happened, for tests and logs. */
  check(): 'unchanged' | 'reloaded' | 'rejected' {
    let sources;
    try {
      sources = readConfigSources(this.opts.dir);
    } catch (err) {
      return this.failed('unreadable', err);
    }
    const hash = hashSources(sources);
    if (hash === this.lastSeenHash) return 'unchanged';
    let next: CompiledConfig;
    try {
      next = compileSources(sources);
    } catch (err) {
      return this.failed(hash, err);
    }
    this.lastSeenHash = hash;
    const previous = this.current;
    this.current = next;
    this.opts.onReload(next, previous);
    return 'reloaded';
  }

  /** Reports a bad set once (polls keep finding the same one), and keeps the running config. */
  private failed(hash: string, err: unknown): 'rejected' | 'unchanged' {
    if (!(err instanceof ConfigError)) throw err;
    if (hash === this.lastSeenHash) return 'unchanged';
    this.lastSeenHash = hash;
    this.opts.onFailure(err);
    return 'rejected';
  }
}

/** A short account of what a reload changed, rule by rule. */
export function diffConfigs(previous: CompiledConfig, next: CompiledConfig): { added: string[]; removed: string[]; changed: string[] } {
  const describe = (c: CompiledConfig): Map<string, string> => {
    const out = new Map<string, string>();
    for (const d of c.domains.values()) {
      for (const r of d.rules) {
        const tiers = [...r.tierLimits].map(([t, ls]) => `${t}:${ls.map((l) => `${l.requestsPerUnit}/${l.unit}`).join('+')}`);
        const limits = r.unlimited ? 'unlimited' : r.limits.map((l) => `${l.requestsPerUnit}/${l.unit}`).join('+');
        out.set(`${d.name}/${r.id}`, [limits, r.algorithm, r.shadow ? 'shadow' : '', ...tiers].join(' '));
      }
    }
    return out;
  };
  const a = describe(previous);
  const b = describe(next);
  return {
    added: [...b.keys()].filter((k) => !a.has(k)),
    removed: [...a.keys()].filter((k) => !b.has(k)),
    changed: [...b.keys()].filter((k) => a.has(k) && a.get(k) !== b.get(k)),
  };
}
