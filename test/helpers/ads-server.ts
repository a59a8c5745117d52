import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import protobuf from 'protobufjs';

/** A management server for tests: Envoy's own AggregatedDiscoveryService (the real ads.proto and
 * discovery.proto that @grpc/grpc-js-xds ships under deps/), serving a state of the world of
 * envoyproxy/ratelimit RateLimitConfig resources the way go-control-plane's snapshot cache does: a stream's
 * request whose version differs from the snapshot's gets the snapshot; each push goes to every open stream. */

const require = createRequire(import.meta.url);
const XDS_DEPS = join(dirname(require.resolve('@grpc/grpc-js-xds/package.json')), 'deps');
const PROTO_DIR = fileURLToPath(new URL('../../proto', import.meta.url));
export const RLC_TYPE = 'type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig';

export interface DiscoveryRequest {
  version_info: string;
  node: { id: string; metadata: { fields: Record<string, { stringValue?: string }> } | null; user_agent_name: string } | null;
  resource_names: string[];
  type_url: string;
  response_nonce: string;
  error_detail: { code: number; message: string } | null;
}

export interface Received {
  stream: number;
  request: DiscoveryRequest;
  metadata: Record<string, string>;
}

type AdsStream = grpc.ServerDuplexStream<DiscoveryRequest, unknown>;

export interface Resource {
  typeUrl?: string;
  /** A RateLimitConfig as JSON (proto field names), or raw bytes. */
  config?: Record<string, unknown>;
  bytes?: Uint8Array;
}

let rlcType: protobuf.Type | undefined;

/** RateLimitConfig encoded with the proto Tollgate ships (envoyproxy/ratelimit's rls_conf.proto). */
export function encodeConfig(config: Record<string, unknown>): Uint8Array {
  if (!rlcType) {
    const root = new protobuf.Root();
    root.resolvePath = (_o, target) => join(PROTO_DIR, target);
    root.loadSync('ratelimit/config/ratelimit/v3/rls_conf.proto', { keepCase: true });
    rlcType = root.lookupType('ratelimit.config.ratelimit.v3.RateLimitConfig');
  }
  const message = rlcType.fromObject(config);
  return rlcType.encode(message).finish();
}

let adsDefinition: grpc.ServiceDefinition | undefined;

/** Envoy's ADS service, loaded once per test file (half a second a load on a busy machine). */
function adsService(): grpc.ServiceDefinition {
  if (!adsDefinition) {
    const def = protoLoader.loadSync('envoy/service/discovery/v3/ads.proto', {
      keepCase: true,
      longs: Number,
      enums: String,
      defaults: true,
      oneofs: true,
      includeDirs: [join(XDS_DEPS, 'envoy-api'), join(XDS_DEPS, 'xds'), join(XDS_DEPS, 'googleapis'), join(XDS_DEPS, 'protoc-gen-validate')],
    });
    const pkg = grpc.loadPackageDefinition(def) as unknown as {
      envoy: { service: { discovery: { v3: { AggregatedDiscoveryService: grpc.ServiceClientConstructor } } } };
    };
    adsDefinition = pkg.envoy.service.discovery.v3.AggregatedDiscoveryService.service;
  }
  return adsDefinition;
}

export class AdsServer {
  readonly received: Received[] = [];
  private readonly server = new grpc.Server({ 'grpc.max_send_message_length': -1 });
  private readonly streams = new Map<number, AdsStream>();
  private snapshot: { version: string; resources: { type_url: string; value: Buffer }[]; typeUrl: string } | undefined;
  private nonce = 0;
  private streamCount = 0;
  port = 0;

  constructor() {
    this.server.addService(adsService(), {
      StreamAggregatedResources: (call: AdsStream) => this.serve(call),
      DeltaAggregatedResources: (call: AdsStream) => call.end(),
    });
  }

  async start(port = 0, credentials = grpc.ServerCredentials.createInsecure()): Promise<number> {
    this.port = await new Promise<number>((resolve, reject) =>
      this.server.bindAsync(`127.0.0.1:${port}`, credentials, (err, p) => (err ? reject(err) : resolve(p))),
    );
    return this.port;
  }

  /** Cuts every stream and stops listening. */
  stop(): void {
    for (const s of this.streams.values()) s.destroy();
    this.streams.clear();
    this.server.forceShutdown();
  }

  /** Sets the state of the world and sends it on every open stream. */
  push(version: string, resources: Resource[], typeUrl = RLC_TYPE): void {
    this.snapshot = {
      version,
      typeUrl,
      resources: resources.map((r) => ({ type_url: r.typeUrl ?? RLC_TYPE, value: Buffer.from(r.bytes ?? encodeConfig(r.config ?? {})) })),
    };
    for (const s of this.streams.values()) this.send(s);
  }

  get openStreams(): number {
    return this.streams.size;
  }

  /** The requests of one stream (by number, from 1) or all of them. */
  requests(stream?: number): DiscoveryRequest[] {
    return this.received.filter((r) => stream === undefined || r.stream === stream).map((r) => r.request);
  }

  private serve(call: AdsStream): void {
    const id = ++this.streamCount;
    this.streams.set(id, call);
    const metadata = Object.fromEntries(Object.entries(call.metadata.getMap()).map(([k, v]) => [k, String(v)]));
    let first = true;
    call.on('data', (request: DiscoveryRequest) => {
      this.received.push({ stream: id, request, metadata });
      if (first && this.snapshot && request.version_info !== this.snapshot.version) this.send(call);
      first = false;
    });
    call.on('error', () => this.streams.delete(id));
    call.on('end', () => {
      this.streams.delete(id);
      call.end();
    });
    call.on('cancelled', () => this.streams.delete(id));
  }

  private send(call: AdsStream): void {
    const s = this.snapshot!;
    call.write({ version_info: s.version, resources: s.resources, type_url: s.typeUrl, nonce: String(++this.nonce) });
  }
}
