import { relative } from 'node:path';
import type { Logger } from 'pino';
import type { CompiledConfig } from './config/compiled.js';
import { type Composed, DomainOwners, type SourceName } from './config/domain-owners.js';
import { type ConfigError, formatProblem } from './config/errors.js';
import { type ConfigLimits, loadConfigDir, pendingConfig } from './config/load.js';
import { OverlayFile } from './config/overlay-file.js';
import { shown } from './config/rls-conf.js';
import { ruleKey } from './config/rule-diff.js';
import { type ConfigDiff, ConfigWatcher, type ReloadOutcome } from './config/watcher.js';
import type { Clock } from './counters/clock.js';
import { fingerprint } from './fingerprint.js';
import type { Metrics } from './metrics/metrics.js';
import type { Settings } from './settings/settings.js';
import type { StoreStack } from './store/create-store.js';
import { XdsConfigSource, type XdsOptions, type XdsSourceOptions } from './xds/source.js';

/** Where the service's descriptor configs come from once it serves: the config directory, watched, one or
 * more xDS management servers, or both. Each source's new config is swapped in whole (beside the others'
 * domains, config/domain-owners.ts), counted and logged, and a rejected one keeps its last good config. */

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

/** The sources Settings names, in the order that decides a domain two of them send (domain-owners.ts): the
 * config directory, then every xDS server as listed. */
export function sourceNames(settings: Settings): SourceName[] {
  const several = settings.xdsServers.length > 1;
  const xds = settings.xdsServers.map((x) => ({
    label: `xDS server ${x.target}${several ? ` (node ${shown(x.node.id)})` : ''}`,
    kind: 'xds' as const,
  }));
  return settings.fromDir ? [{ label: settings.configDir, kind: 'dir' as const }, ...xds] : xds;
}

/** What the service starts on, before any source has said more: the config directory's (read now, so a bad
 * one stops the start), else none yet; `owners` holds it for configSource, which composes every later change. */
export interface InitialConfig {
  dir: CompiledConfig | undefined;
  config: CompiledConfig;
  owners: DomainOwners;
}

export function initialConfig(settings: Settings, limits: ConfigLimits): InitialConfig {
  const dir = settings.fromDir ? loadConfigDir(settings.configDir, limits) : undefined;
  const owners = new DomainOwners(sourceNames(settings));
  const config = dir ? owners.set(0, dir).config : pendingConfig();
  return { dir, config, owners };
}

/** Reloads swap the union of every source's config in through `swap`, and are counted and logged;
 * rejections keep the source's last good config. */
export function configSource(
  settings: Settings,
  limits: ConfigLimits,
  initial: InitialConfig,
  deps: SourceDeps,
  swap: (next: CompiledConfig) => void,
): ConfigSource {
  const names = sourceNames(settings);
  const { owners, dir: dirConfig } = initial;
  const overlay = overlayFile(settings, limits, deps.logger);
  const firstXds = settings.fromDir ? 1 : 0;
  const feeds: Feed[] = names.map((name, i) => {
    const events = sourceEvents(settings, deps, owners, { name, index: i, swap });
    if (name.kind === 'dir') return dirFeed(settings, limits, dirConfig!, deps.logger, events);
    return xdsFeed(settings.xdsServers[i - firstXds]!, limits, deps, { ...events, overlay, alone: names.length === 1 });
  });
  if (overlay) feeds.push({ start: () => overlay.start(settings.configPollMs), stop: () => overlay.stop() });
  const xdsFeeds = feeds.filter((f) => f.xds);
  // With several servers, 1 only while every stream is up.
  if (xdsFeeds.length > 0)
    deps.metrics.gauge(
      'tollgate_xds_connected',
      'Whether the stream to the xDS management server is up (1) or not (0)',
      () => (xdsFeeds.every((f) => f.xds!.connected) ? 1 : 0),
      {},
      'min',
    );
  return {
    start: () => {
      for (const f of feeds) f.start();
    },
    stop: () => {
      for (const f of feeds) f.stop();
    },
    // The config directory is the one source read on demand; xDS configs arrive when their servers send them.
    reload: () => feeds.find((f) => f.reload)?.reload?.() ?? Promise.resolve('unchanged'),
    waiting: () => {
      const waitingFor = xdsFeeds.filter((f) => !f.xds!.ready).map((f) => f.xds!.target);
      if (waitingFor.length === 0 || settings.forceStart) return undefined;
      return `waiting for the first config from the xDS server ${waitingFor.join(', ')} (FORCE_START_WITHOUT_INITIAL_CONFIG=true to be ready without it)`;
    },
  };
}

interface Feed {
  start(): void;
  stop(): void;
  reload?: () => Promise<ReloadOutcome>;
  xds?: { connected: boolean; ready: boolean; target: string };
}

interface SourceEvents {
  onReload: XdsSourceOptions['onReload'];
  onFailure: XdsSourceOptions['onFailure'];
  overlay?: OverlayFile;
  /** The only source: its first config makes the service ready, and an empty one admits everything. */
  alone?: boolean;
  /** The source's first config is applied. */
  first: () => void;
}

/** What one source's reloads and rejections do: the union is recomposed and swapped in, a domain another
 * source owns is refused and logged by its fingerprint (its name is the control plane's text, and a conflict
 * is the one place two control planes' texts meet), and every source's first config makes the service ready. */
function sourceEvents(
  settings: Settings,
  deps: SourceDeps,
  owners: DomainOwners,
  at: { name: SourceName; index: number; swap: (next: CompiledConfig) => void },
): SourceEvents {
  const { logger, metrics, clock, stack } = deps;
  let current: CompiledConfig | undefined;
  const from = at.name.label;
  const onReload = (next: CompiledConfig, previous: CompiledConfig, diff: ConfigDiff): void => {
    current = next;
    const composed = owners.set(at.index, next);
    at.swap(composed.config);
    stack.cache?.clear(); // limits may have changed under the cached "full until" times
    metrics.configReloads.inc({ result: 'success' });
    metrics.configLoaded(composed.config.hash, clock.now());
    const reported = composed.refused.length > 0 ? withoutDomains(diff, composed.refused, [previous, next]) : diff;
    logger.info({ hash: composed.config.hash, previous: composed.previousHash, ...(owners.size > 1 && { from }), ...shortDiff(reported) }, 'config reloaded');
    if (reported.restarted.length > 0)
      logger.info(
        { restarted: reported.restarted.slice(0, 50), ...(owners.size > 1 && { from }) },
        'limits moved between a window and a token bucket: their counters start fresh',
      );
    logOwnership(logger, from, composed);
    logNotes(logger, next);
  };
  const onFailure = (err: ConfigError): void => {
    metrics.configReloads.inc({ result: 'failure' });
    const detail =
      at.name.kind === 'xds' ? { problems: err.problems.map(formatProblem).slice(0, 50) } : { dir: settings.configDir, ...causes(settings.configDir, err) };
    logger.error({ ...detail, from, keeping: current?.hash ?? 'none' }, 'config reload rejected: keeping the last good config');
  };
  const first = (): void => {
    if (owners.allDelivered()) deps.onReady();
  };
  return { onReload, onFailure, first };
}

/** A refused domain's rules are not this source's to report: its name is logged only by fingerprint. */
function withoutDomains(diff: ConfigDiff, refused: Composed['refused'], configs: CompiledConfig[]): ConfigDiff {
  const hidden = new Set<string>();
  for (const { domain } of refused) for (const c of configs) for (const r of c.domains.get(domain)?.rules ?? []) hidden.add(ruleKey(r));
  const out = {} as ConfigDiff;
  // A restarted limit is its rule's key and ` per_<unit>` (rule-diff.ts).
  const rule = (entry: string, k: keyof ConfigDiff): string => (k === 'restarted' ? entry.replace(/ per_\w+$/, '') : entry);
  for (const [k, list] of Object.entries(diff) as [keyof ConfigDiff, string[]][]) out[k] = list.filter((e) => !hidden.has(rule(e, k)));
  return out;
}

function logOwnership(logger: Logger, from: string, composed: Composed): void {
  for (const { domain, owner } of composed.refused.slice(0, 50))
    logger.error(
      { from, owner, domain: fingerprint(domain), refusedCount: composed.refused.length },
      'config domain refused: another config source already serves it, and keeps it',
    );
  for (const { domain, to } of composed.moved.slice(0, 50))
    logger.warn({ to, domain: fingerprint(domain) }, 'config domain dropped by its source: now served from the other source that sends it');
}

/** XDS_OVERLAY_FILE, read now (a bad one stops the start with its problems, as a bad config directory does). */
function overlayFile(settings: Settings, limits: ConfigLimits, logger: Logger): OverlayFile | undefined {
  if (!settings.xdsOverlay) return undefined;
  return new OverlayFile(settings.xdsOverlay, limits.maxFileBytes, (problem) =>
    problem
      ? logger.error({ file: settings.xdsOverlay, problem }, 'xDS overlay file cannot be read: keeping the last one read')
      : logger.info({ file: settings.xdsOverlay }, 'xDS overlay file readable again'),
  );
}

function dirFeed(settings: Settings, limits: ConfigLimits, current: CompiledConfig, logger: Logger, events: SourceEvents): Feed {
  const watcher = new ConfigWatcher({ dir: settings.configDir, pollMs: settings.configPollMs, limits, current, logger, ...events });
  return {
    start: () => settings.configPollMs > 0 && watcher.start(),
    stop: () => watcher.stop(),
    reload: () => watcher.check(),
  };
}

function xdsFeed(xds: XdsOptions, limits: ConfigLimits, deps: SourceDeps, events: SourceEvents): Feed {
  const { logger, metrics, clock } = deps;
  const counters = metrics.xds();
  let firstLogged = false;
  const source: XdsConfigSource = new XdsConfigSource({
    xds,
    limits,
    current: pendingConfig(),
    logger,
    onReload: events.onReload,
    onFailure: events.onFailure,
    overlay: events.overlay,
    alone: events.alone,
    onNotes: (notes) => logger.warn({ notes, server: xds.target }, `xDS overlay: ${notes[0]}${notes.length > 1 ? ` (and ${notes.length - 1} more)` : ''}`),
    // Ready on the first config applied, whether a response or an overlay fix after a rejected one brought it.
    onApplied: () => {
      if (firstLogged) return;
      firstLogged = true;
      const ready = events.alone ? 'ready' : 'ready once every source has sent one';
      logger.info({ version: shown(source.version), ...(!events.alone && { server: xds.target }) }, `first config from the xDS server applied: ${ready}`);
      events.first();
    },
    events: {
      response: (result) => {
        counters.responses.inc({ result });
        if (result === 'applied') counters.lastApplied.set(Math.floor(clock.now() / 1000));
      },
      streamError: (code) => counters.streamErrors.inc({ code }),
      connectFailure: (reason) => counters.connectFailures.inc({ reason }),
    },
  });
  return {
    start: () => source.start(),
    stop: () => source.stop(),
    xds: {
      get connected() {
        return source.connected;
      },
      get ready() {
        return source.ready;
      },
      target: xds.target,
    },
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
