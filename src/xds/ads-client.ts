import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import type { Logger } from 'pino';
import { shown, type XdsResource } from '../config/rls-conf.js';
import type { Backoff } from './backoff.js';
import { CONNECT_FAILURE_TEXT, type ConnectFailure, type ConnectFailureReason, connectFailure } from './connect-failure.js';

const PROTO_DIR = fileURLToPath(new URL('../../proto', import.meta.url));

/** What the client sends as its node (envoy.config.core.v3.Node). */
export interface XdsNode {
  id: string;
  metadata: Record<string, string>;
  userAgentVersion: string;
}

export interface AdsClientOptions {
  /** host:port of the management server, as envoyproxy/ratelimit's CONFIG_GRPC_XDS_SERVER_URL. */
  target: string;
  credentials: grpc.ChannelCredentials;
  /** Server name checked in its certificate instead of the host (CONFIG_GRPC_XDS_SERVER_TLS_SAN). */
  serverName: string | undefined;
  /** Extra metadata on the stream (CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS). */
  headers: Record<string, string>;
  node: XdsNode;
  typeUrl: string;
  maxMessageBytes: number;
  /** While the server cannot be reached at all, a connection is tried this often. */
  connectRetryMs: number;
  /** The wait before opening a new stream after one broke. */
  backoff: Backoff;
  logger: Logger;
  /** Applies one response's resources; resolves to undefined to ACK it, or to the reason to NACK it. */
  apply: (resources: XdsResource[]) => Promise<string | undefined>;
  /** Every response, by what became of it, every broken stream by its status code name, and every attempt to
   * connect that failed, by why. */
  events: {
    response(result: 'applied' | 'nacked' | 'refused'): void;
    streamError(code: string): void;
    connectFailure(reason: ConnectFailureReason): void;
  };
}

interface DiscoveryResponse {
  version_info: string;
  resources: { type_url: string; value: Buffer }[];
  type_url: string;
  nonce: string;
}

type Stream = grpc.ClientDuplexStream<object, DiscoveryResponse>;

/** Envoy's NACK (source/extensions/config_subscription/grpc/grpc_mux_impl.cc): code INTERNAL, the message
 * cut to 4 KiB (Config::Utility::truncateGrpcStatusMessage). */
const NACK_CODE = grpc.status.INTERNAL;
const MAX_NACK_BYTES = 4096;
/** A stream of a healthy server carries nothing between changes: keepalive pings find a dead one. Not more
 * often than grpc-go servers accept by default (their enforcement policy's minimum is 5 minutes). */
const KEEPALIVE_MS = 330_000;
const KEEPALIVE_TIMEOUT_MS = 20_000;

/** A state-of-the-world client of one resource type over Envoy's aggregated discovery service, by the xDS
 * protocol's rules (envoy/service/discovery/v3/discovery.proto, Envoy's "xDS REST and gRPC protocol" doc):
 * the first request on a stream names the node, subscribes to every resource of the type (no names) and
 * says which version is applied ("" before the first); each response is ACKed with its version and nonce, or
 * NACKed with the applied version, its nonce and error_detail. Responses are applied one at a time; one that
 * arrives while another is being applied replaces any still waiting (each holds the whole state). A broken
 * stream is reopened after the backoff; decisions never wait for any of this. */
export class AdsClient {
  private readonly client: grpc.Client;
  private stream: Stream | undefined;
  private applied = '';
  private waiting: { stream: Stream; response: DiscoveryResponse } | undefined;
  private applying = false;
  private retry: NodeJS.Timeout | undefined;
  private stopped = false;
  /** The current stream has carried a response: the server is there and speaking xDS. */
  private answered = false;
  /** Why the last attempt to connect failed, until a stream has a connection: a line is logged when it changes. */
  private failing: ConnectFailureReason | undefined;
  /** The channel's state is being watched for the connection after failures (untilConnected). */
  private watching = false;

  constructor(private readonly o: AdsClientOptions) {
    const Ads = adsConstructor();
    this.client = new Ads(o.target, o.credentials, {
      'grpc.max_receive_message_length': o.maxMessageBytes,
      'grpc.initial_reconnect_backoff_ms': o.connectRetryMs,
      'grpc.max_reconnect_backoff_ms': o.connectRetryMs,
      'grpc.keepalive_time_ms': KEEPALIVE_MS,
      'grpc.keepalive_timeout_ms': KEEPALIVE_TIMEOUT_MS,
      ...(o.serverName ? { 'grpc.ssl_target_name_override': o.serverName, 'grpc.default_authority': o.serverName } : {}),
    });
  }

  /** The version last applied (ACKed), "" before the first. */
  get version(): string {
    return this.applied;
  }

  /** A stream is open and its channel connected. */
  get connected(): boolean {
    return this.stream !== undefined && this.client.getChannel().getConnectivityState(false) === grpc.connectivityState.READY;
  }

  start(): void {
    this.open();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.retry);
    const s = this.stream;
    this.stream = undefined;
    s?.cancel();
    this.client.close();
  }

  private open(): void {
    if (this.stopped) return;
    // Not waitForReady: a call that waits for a connection never hears why there is none. Without it, the call
    // fails at once when the channel cannot connect, with the reason (connectFailed), and is tried again.
    const metadata = new grpc.Metadata({ waitForReady: false });
    for (const [k, v] of Object.entries(this.o.headers)) metadata.set(k, v);
    const stream = (this.client as unknown as { StreamAggregatedResources(m: grpc.Metadata): Stream }).StreamAggregatedResources(metadata);
    this.stream = stream;
    this.answered = false;
    stream.on('data', (r: DiscoveryResponse) => this.received(stream, r));
    stream.on('error', (err: grpc.ServiceError) => this.broken(stream, err));
    stream.on('end', () => this.broken(stream, undefined));
    this.send(stream, {
      version_info: this.applied,
      node: nodeMessage(this.o.node),
      resource_names: [],
      type_url: this.o.typeUrl,
      response_nonce: '',
    });
    // Once per stream that had a connection before, not on every attempt while the server cannot be reached.
    const level = this.failing === undefined ? 'info' : 'debug';
    this.o.logger[level]({ server: this.o.target, version: shown(this.applied) }, 'xDS stream opened, asking for rate-limit configs');
  }

  private received(stream: Stream, response: DiscoveryResponse): void {
    if (stream !== this.stream) return;
    if (!this.answered) {
      this.answered = true;
      this.failing = undefined;
      this.o.backoff.reset();
      this.o.logger.info({ server: this.o.target }, 'xDS server answered');
    }
    if (response.type_url !== this.o.typeUrl) {
      // Not the type this client subscribed to: Envoy ignores such a response (grpc_mux_impl.cc), and so does
      // Tollgate, saying so; neither an ACK nor a NACK belongs to a subscription that does not exist.
      this.o.events.response('refused');
      this.o.logger.warn({ typeUrl: shown(response.type_url) }, 'xDS response of a type not asked for: ignored');
      return;
    }
    this.waiting = { stream, response };
    if (!this.applying) void this.drain();
  }

  private async drain(): Promise<void> {
    this.applying = true;
    try {
      while (this.waiting && !this.stopped) {
        const { stream, response } = this.waiting;
        this.waiting = undefined;
        await this.answer(stream, response);
      }
    } finally {
      this.applying = false;
    }
  }

  /** Applies a response and ACKs or NACKs it on the stream it came on, if that stream is still open. */
  private async answer(stream: Stream, r: DiscoveryResponse): Promise<void> {
    // Each resource gets a buffer of its own, which moves to the reader thread without another copy.
    const resources = r.resources.map((a) => ({ typeUrl: a.type_url, value: new Uint8Array(a.value) }));
    let problem: string | undefined;
    try {
      problem = await this.o.apply(resources);
    } catch (err) {
      problem = `cannot apply: ${(err as Error).message}`;
    }
    if (this.stopped) return;
    if (problem === undefined) this.applied = r.version_info;
    this.o.events.response(problem === undefined ? 'applied' : 'nacked');
    if (stream !== this.stream) return;
    this.send(stream, {
      version_info: this.applied,
      type_url: this.o.typeUrl,
      response_nonce: r.nonce,
      ...(problem === undefined ? {} : { error_detail: { code: NACK_CODE, message: truncate(problem, MAX_NACK_BYTES) } }),
    });
  }

  /** A write to a stream that broke an instant ago is lost, not thrown: the stream's own error reopens it. */
  private send(stream: Stream, request: object): void {
    try {
      stream.write(request);
    } catch (err) {
      this.o.logger.debug({ err: (err as Error).message }, 'xDS request not sent: the stream is closing');
    }
  }

  private broken(stream: Stream, err: grpc.ServiceError | undefined): void {
    if (stream !== this.stream || this.stopped) return;
    this.stream = undefined;
    stream.cancel();
    const failure = err && connectFailure(err);
    if (failure) {
      this.connectFailed(failure);
      return;
    }
    this.failing = undefined; // it had a connection
    const code = err ? (grpc.status[err.code] ?? 'UNKNOWN') : 'ENDED';
    this.o.events.streamError(code);
    const delayMs = this.o.backoff.next();
    this.o.logger.warn(
      { server: this.o.target, code, details: err ? shown(err.details ?? '') : undefined, retryInMs: delayMs, keeping: shown(this.applied) },
      err?.code === grpc.status.RESOURCE_EXHAUSTED
        ? 'xDS stream broken by a message over the size limit (XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES): keeping the applied config'
        : 'xDS stream broken: keeping the applied config, decisions go on',
    );
    this.retry = setTimeout(() => this.open(), delayMs);
    this.retry.unref();
  }

  /** No connection: counted by reason every attempt, logged when the reason changes, tried again every
   * CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL (the channel reconnects as often). */
  private connectFailed(f: ConnectFailure): void {
    this.o.events.connectFailure(f.reason);
    if (f.reason !== this.failing) {
      this.failing = f.reason;
      this.o.logger.warn(
        { server: this.o.target, reason: f.reason, detail: f.detail, retryEveryMs: this.o.connectRetryMs, keeping: shown(this.applied) },
        `cannot connect to the xDS server: ${CONNECT_FAILURE_TEXT[f.reason]}`,
      );
    }
    this.untilConnected();
    this.retry = setTimeout(() => this.open(), this.o.connectRetryMs);
    this.retry.unref();
  }

  /** After connections failed, one line once the channel connects: the stream may then carry nothing for a
   * long while (a server with nothing newer than the applied version sends nothing). One watch at a time. */
  private untilConnected(): void {
    if (this.watching) return;
    this.watching = true;
    const channel = this.client.getChannel();
    const check = (): void => {
      const state = this.stopped || this.failing === undefined ? undefined : channel.getConnectivityState(false);
      if (state !== undefined && state !== grpc.connectivityState.READY) {
        channel.watchConnectivityState(state, Infinity, check);
        return;
      }
      this.watching = false;
      if (state === undefined) return; // stopped, or a stream got through and said so
      this.failing = undefined;
      this.o.logger.info({ server: this.o.target }, 'connected to the xDS server');
    };
    check();
  }
}

let adsCtor: grpc.ServiceClientConstructor | undefined;

function adsConstructor(): grpc.ServiceClientConstructor {
  if (!adsCtor) {
    const def = protoLoader.loadSync('envoy/service/discovery/v3/ads.proto', {
      keepCase: true,
      longs: Number,
      enums: String,
      defaults: true,
      oneofs: true,
      includeDirs: [PROTO_DIR],
    });
    const root = grpc.loadPackageDefinition(def) as unknown as {
      envoy: { service: { discovery: { v3: { AggregatedDiscoveryService: grpc.ServiceClientConstructor } } } };
    };
    adsCtor = root.envoy.service.discovery.v3.AggregatedDiscoveryService;
  }
  return adsCtor;
}

/** envoy.config.core.v3.Node: metadata as a google.protobuf.Struct of strings, as envoyproxy/ratelimit sends it
 * (the well-known types' fields are camelCase in proto-loader, keepCase or not). */
function nodeMessage(node: XdsNode): object {
  const fields = Object.fromEntries(Object.entries(node.metadata).map(([k, v]) => [k, { stringValue: v }]));
  return { id: node.id, metadata: { fields }, user_agent_name: 'tollgate', user_agent_version: node.userAgentVersion };
}

function truncate(text: string, maxBytes: number): string {
  const buf = Buffer.from(text);
  return buf.length <= maxBytes ? text : `${buf.subarray(0, maxBytes - 20).toString('utf8')}… (truncated)`;
}
