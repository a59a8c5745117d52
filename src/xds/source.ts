import type * as grpc from '@grpc/grpc-js';
import type { Logger } from 'pino';
import type { CompiledConfig } from '../config/compiled.js';
import { ConfigError, formatProblem } from '../config/errors.js';
import type { ConfigLimits } from '../config/load.js';
import type { OverlayFile } from '../config/overlay-file.js';
import { ConfigPipeline } from '../config/pipeline.js';
import { RLS_CONFIG_TYPE_URL, type XdsResource } from '../config/rls-conf.js';
import type { ConfigDiff } from '../config/rule-diff.js';
import { AdsClient, type AdsClientOptions, type XdsNode } from './ads-client.js';
import { Backoff, type BackoffOptions } from './backoff.js';

/** CONFIG_TYPE=GRPC_XDS_SOTW: where the management server is and how to reach it (settings/sections.ts reads them). */
export interface XdsOptions {
  target: string;
  credentials: grpc.ChannelCredentials;
  serverName: string | undefined;
  headers: Record<string, string>;
  node: XdsNode;
  maxMessageBytes: number;
  connectRetryMs: number;
  backoff: BackoffOptions;
}

export interface XdsSourceOptions {
  xds: XdsOptions;
  limits: ConfigLimits;
  current: CompiledConfig;
  logger: Logger;
  onReload: (next: CompiledConfig, previous: CompiledConfig, diff: ConfigDiff) => void;
  onFailure: (err: ConfigError) => void;
  events: AdsClientOptions['events'];
  /** XDS_OVERLAY_FILE: applied to every response, and to the last one again when the file changes. */
  overlay?: OverlayFile;
  /** The only config source: an empty set admits everything (else only this server's domains are dropped). */
  alone?: boolean;
  /** A config was applied, from a response or an overlay change: the first one makes the service ready. */
  onApplied?: () => void;
  /** Overlay entries the last applied config had no path for. */
  onNotes?: (notes: string[]) => void;
}

const WHERE = 'xDS response';

/** Descriptor configs from an xDS management server (as Envoy Gateway serves them to envoyproxy/ratelimit):
 * every response's resources go through the config pipeline a file does, and become the running config as a
 * hot reload does (decisions keep flowing; counters of unchanged limits stay). An invalid response is NACKed
 * with every problem and the last good config stays. Until the first config is applied, `ready` is false. */
export class XdsConfigSource {
  private readonly pipeline: ConfigPipeline;
  private readonly client: AdsClient;
  private received = false;
  private stopped = false;
  /** The last response's resources, kept for an overlay change (the read moves their bytes to the reader). */
  private last: XdsResource[] | undefined;
  /** Applies run one at a time: the server's responses and overlay changes share one reader thread. */
  private queue: Promise<unknown> = Promise.resolve();

  constructor(private readonly opts: XdsSourceOptions) {
    this.pipeline = new ConfigPipeline(opts.current, opts.limits, opts.logger);
    const { xds } = opts;
    this.client = new AdsClient({
      ...xds,
      typeUrl: RLS_CONFIG_TYPE_URL,
      backoff: new Backoff(xds.backoff),
      logger: opts.logger,
      apply: (resources) => this.serial(() => this.apply(resources)),
      events: opts.events,
    });
  }

  /** A config from the server has been applied (an empty one included). */
  get ready(): boolean {
    return this.received;
  }

  get connected(): boolean {
    return this.client.connected;
  }

  get version(): string {
    return this.client.version;
  }

  start(): void {
    this.client.start();
    this.opts.overlay?.onChange(() => void this.reapply());
  }

  /** The overlay changed: the last response again, with it; a rejection keeps the running config (logged). */
  reapply(): Promise<string | undefined> {
    return this.serial(() => (this.last && !this.stopped ? this.apply(copies(this.last), false) : Promise.resolve(undefined)));
  }

  private serial<T>(run: () => Promise<T>): Promise<T> {
    const next = this.queue.then(run);
    this.queue = next.catch(() => undefined);
    return next;
  }

  stop(): void {
    this.stopped = true;
    this.client.stop();
    this.pipeline.close();
  }

  /** Resolves to undefined (ACK) or the NACK's message. The same set as the running one is ACKed as is. `keep`:
   * a response from the server, kept for an overlay change (a reapply passes a copy of the one kept). */
  private async apply(resources: XdsResource[], keep = true): Promise<string | undefined> {
    const { limits, logger, overlay } = this.opts;
    if (overlay && keep) this.last = copies(resources);
    const origin = { kind: 'xds' as const, resources, ...(overlay && { overlay: overlay.current }) };
    const read = await this.pipeline.read(origin, limits, [this.pipeline.current.hash], WHERE);
    // Stopped meanwhile (the reader thread with it): nothing to apply, report or answer.
    if (this.stopped) return undefined;
    if (read.type === 'unchanged') return this.applied();
    if (read.type === 'invalid') return this.rejected(new ConfigError(read.problems));
    const swapped = await this.pipeline.swapIn(read.hash, read.slices, WHERE);
    if (this.stopped) return undefined;
    if (swapped.type === 'invalid') return this.rejected(new ConfigError(swapped.problems));
    // The server is the source of truth: an empty set drops every limit, as envoyproxy/ratelimit and Envoy do
    // with an empty state of the world. Said loudly, since it admits everything.
    if (read.domains === 0 && swapped.previous.domains.size > 0) {
      if (this.opts.alone !== false) logger.warn('xDS server sent no rate-limit config: every request will pass until it sends one');
      else logger.warn({ server: this.opts.xds.target }, "xDS server sent no rate-limit config: its domains are dropped, the other sources' stay");
    }
    this.opts.onReload(swapped.next, swapped.previous, swapped.diff);
    if (read.notes.length > 0) this.opts.onNotes?.(read.notes);
    return this.applied();
  }

  private applied(): undefined {
    this.received = true;
    this.opts.onApplied?.();
    return undefined;
  }

  private rejected(err: ConfigError): string {
    this.opts.onFailure(err);
    return err.problems.map(formatProblem).join('\n');
  }
}

/** Resources whose bytes survive the read's transfer to the reader thread. */
function copies(resources: readonly XdsResource[]): XdsResource[] {
  return resources.map((r) => ({ typeUrl: r.typeUrl, value: r.value.slice() }));
}
