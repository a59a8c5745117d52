import { relative } from 'node:path';
import type { Logger } from 'pino';
import type { CompiledConfig } from './config/compiled.js';
import { type ConfigError, formatProblem } from './config/errors.js';
import type { ConfigLimits } from './config/load.js';
import { shown } from './config/rls-conf.js';
import { type ConfigDiff, ConfigWatcher, type ReloadOutcome } from './config/watcher.js';
import type { Clock } from './counters/clock.js';
import type { Metrics } from './metrics/metrics.js';
import type { Settings } from './settings/settings.js';
import type { StoreStack } from './store/create-store.js';
import { XdsConfigSource, type XdsOptions, type XdsSourceOptions } from './xds/source.js';

/** Where the service's descriptor configs come from once it serves: the config directory, watched, or an xDS
 * management server. Either way a new config is swapped in whole, counted and logged, and a rejected one
 * keeps the last good config. */

/** Keys that load but change nothing (detailed_metric): one line, naming where each is written. */
export function logNotes(logger: Logger, config: CompiledConfig): void {
  const notes = [...config.domains.values()].flatMap((d) => d.notes);
  if (notes.length > 0)
    logger.warn(
      { notes: notes.slice(0, 50), count: notes.length },
      `descriptor config: ${notes[0]}${notes.length > 1 ? ` (and ${notes.length - 1} more)` : ''}`,
    );
}

/** Where configs come from once serving: the config directory (watched) or an xDS management server. */
export interface ConfigSource {
  start(): void;
  stop(): void;
  /** Re-reads the config directory now; an xDS config arrives when the server sends it ('unchanged'). */
  reload(): Promise<ReloadOutcome>;
  /** Why there is no config to decide by yet, or undefined once there is. */
  waiting(): string | undefined;
}

export interface SourceDeps {
  logger: Logger;
  metrics: Metrics;
  clock: Clock;
  stack: StoreStack;
  /** The first config has arrived (xDS). */
  onReady: () => void;
}

/** Reloads swap the config in through `swap`, and are counted and logged; rejections keep it. */
export function configSource(
  settings: Settings,
  limits: ConfigLimits,
  initial: CompiledConfig,
  deps: SourceDeps,
  swap: (next: CompiledConfig) => void,
): ConfigSource {
  const { logger, metrics, clock, stack } = deps;
  let current = initial;
  const where = settings.xds ? `xDS server ${settings.xds.target}` : settings.configDir;
  const onReload = (next: CompiledConfig, previous: CompiledConfig, diff: ConfigDiff): void => {
    current = next;
    swap(next);
    stack.cache?.clear(); // limits may have changed under the cached "full until" times
    metrics.configReloads.inc({ result: 'success' });
    metrics.configLoaded(next.hash, clock.now());
    logger.info({ hash: next.hash, previous: previous.hash, ...shortDiff(diff) }, 'config reloaded');
    if (diff.restarted.length > 0)
      logger.info({ restarted: diff.restarted.slice(0, 50) }, 'limits moved between a window and a token bucket: their counters start fresh');
    logNotes(logger, next);
  };
  const onFailure = (err: ConfigError): void => {
    metrics.configReloads.inc({ result: 'failure' });
    const detail = settings.xds ? { problems: err.problems.map(formatProblem).slice(0, 50) } : { dir: settings.configDir, ...causes(settings.configDir, err) };
    logger.error({ ...detail, from: where, keeping: current.hash }, 'config reload rejected: keeping the last good config');
  };
  if (settings.xds) return xdsSource(settings, settings.xds, { limits, initial, deps, onReload, onFailure });
  const watcher = new ConfigWatcher({ dir: settings.configDir, pollMs: settings.configPollMs, limits, current: initial, logger, onReload, onFailure });
  return {
    start: () => settings.configPollMs > 0 && watcher.start(),
    stop: () => watcher.stop(),
    reload: () => watcher.check(),
    waiting: () => undefined,
  };
}

function xdsSource(
  settings: Settings,
  xds: XdsOptions,
  p: { limits: ConfigLimits; initial: CompiledConfig; deps: SourceDeps; onReload: XdsSourceOptions['onReload']; onFailure: XdsSourceOptions['onFailure'] },
): ConfigSource {
  const { logger, metrics, clock } = p.deps;
  const counters = metrics.xds();
  let readyLogged = false;
  const source = new XdsConfigSource({
    xds,
    limits: p.limits,
    current: p.initial,
    logger,
    onReload: p.onReload,
    onFailure: p.onFailure,
    events: {
      response: (result) => {
        counters.responses.inc({ result });
        if (result === 'applied') counters.lastApplied.set(Math.floor(clock.now() / 1000));
        if (result === 'applied' && !readyLogged) {
          readyLogged = true;
          logger.info({ version: shown(source.version) }, 'first config from the xDS server applied: ready');
          p.deps.onReady();
        }
      },
      streamError: (code) => counters.streamErrors.inc({ code }),
      connectFailure: (reason) => counters.connectFailures.inc({ reason }),
    },
  });
  metrics.gauge('tollgate_xds_connected', 'Whether the stream to the xDS management server is up (1) or not (0)', () => (source.connected ? 1 : 0), {}, 'min');
  return {
    start: () => source.start(),
    stop: () => source.stop(),
    reload: () => Promise.resolve('unchanged'),
    waiting: () =>
      source.ready || settings.forceStart
        ? undefined
        : `waiting for the first config from the xDS server ${xds.target} (FORCE_START_WITHOUT_INITIAL_CONFIG=true to be ready without it)`,
  };
}

/** A reload of thousands of rules would otherwise log them all on one line: name the first few, count all. */
function shortDiff(diff: ConfigDiff): Record<string, unknown> {
  const MAX = 50;
  const out: Record<string, unknown> = {};
  for (const [k, list] of Object.entries(diff) as [keyof ConfigDiff, string[]][]) {
    out[k] = list.slice(0, MAX);
    if (list.length > MAX) out[`${k}Count`] = list.length;
  }
  return out;
}

/** The problems as lines, and for a file or directory that could not be read, its name within the config
 * directory and the error code, to search logs by. */
function causes(dir: string, err: ConfigError): { problems: string[]; causes?: { file: string; code: string }[] } {
  const read = err.problems.filter((p) => p.code !== undefined).map((p) => ({ file: relative(dir, p.file) || '.', code: p.code! }));
  return { problems: err.problems.map(formatProblem), ...(read.length > 0 ? { causes: read } : {}) };
}
