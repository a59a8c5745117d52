import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import * as grpc from '@grpc/grpc-js';
import { type Logger, pino } from 'pino';
import type { TierStore } from '../../src/control/tier-store.js';
import { ManualClock } from '../../src/counters/clock.js';
import { clientConstructor, HEALTH_SERVICE, RLS_SERVICE } from '../../src/server/proto.js';
import { type RunningService, startService } from '../../src/service.js';
import { parseServeArgs } from '../../src/settings/settings.js';

/** A time on an hour boundary, so tests know where every window starts. */
export const HOUR_START = 1_800_000_000_000;

export interface TestService {
  service: RunningService;
  clock: ManualClock;
  rls: RlsClient;
  close(): Promise<void>;
}

export interface RlsEntry {
  key: string;
  value: string;
}

export interface RlsDescriptor {
  entries: RlsEntry[];
  limit?: { requests_per_unit: number; unit: number | string };
  hits_addend?: { value: number };
  /** Envoy 1.38+: the hits are a refund. */
  is_negative_hits?: boolean;
}

export interface RlsRequest {
  domain: string;
  descriptors: RlsDescriptor[];
  hits_addend?: number;
}

export interface RlsResponse {
  overall_code: string;
  statuses: {
    code: string;
    current_limit: { name: string; requests_per_unit: number; unit: string } | null;
    limit_remaining: number;
    duration_until_reset: { seconds: number; nanos: number } | null;
  }[];
  response_headers_to_add: { key: string; value: string }[];
  request_headers_to_add: { key: string; value: string }[];
  raw_body: Buffer;
}

/** A real @grpc/grpc-js client over TCP; enums come back as names to keep assertions readable. */
export class RlsClient {
  private readonly client: grpc.Client & { ShouldRateLimit: UnaryMethod };
  /** `options`: channel options; a distinct value of any option gives the client a connection of its own. */
  constructor(port: number, options: grpc.ChannelOptions = {}, credentials = grpc.credentials.createInsecure()) {
    const Ctor = clientConstructor(RLS_SERVICE);
    this.client = new Ctor(`127.0.0.1:${port}`, credentials, options) as unknown as grpc.Client & { ShouldRateLimit: UnaryMethod };
  }

  /** `metadata`: what Envoy sends beside the request (its tracing headers). */
  call(req: RlsRequest, deadlineMs = 5000, metadata = new grpc.Metadata()): Promise<RlsResponse> {
    return new Promise((resolve, reject) => {
      this.client.ShouldRateLimit(req, metadata, { deadline: Date.now() + deadlineMs }, (err: grpc.ServiceError | null, res: unknown) => {
        if (err) reject(err);
        else resolve(named(res as RawResponse));
      });
    });
  }

  close(): void {
    this.client.close();
  }
}

type UnaryMethod = (req: unknown, ...rest: unknown[]) => void;

export function healthClient(port: number): grpc.Client & { Check: UnaryMethod } {
  const Ctor = clientConstructor(HEALTH_SERVICE);
  return new Ctor(`127.0.0.1:${port}`, grpc.credentials.createInsecure()) as unknown as grpc.Client & { Check: UnaryMethod };
}

type RawResponse = Omit<RlsResponse, 'overall_code' | 'statuses'> & {
  overall_code: number;
  statuses: (Omit<RlsResponse['statuses'][number], 'code' | 'current_limit'> & {
    code: number;
    current_limit: { name: string; requests_per_unit: number; unit: number } | null;
  })[];
};

const CODES = ['UNKNOWN', 'OK', 'OVER_LIMIT'];
const UNITS = ['UNKNOWN', 'SECOND', 'MINUTE', 'HOUR', 'DAY', 'MONTH', 'YEAR', 'WEEK'];

function named(r: RawResponse): RlsResponse {
  return {
    ...r,
    overall_code: CODES[r.overall_code]!,
    statuses: r.statuses.map((s) => ({
      ...s,
      code: CODES[s.code]!,
      current_limit: s.current_limit && { ...s.current_limit, unit: UNITS[s.current_limit.unit]! },
    })),
  };
}

export function header(res: RlsResponse, name: string): string | undefined {
  return res.response_headers_to_add.find((h) => h.key.toLowerCase() === name.toLowerCase())?.value;
}

/** Writes YAML files into a fresh directory and returns its path. */
export function configDir(files: Record<string, string>): string {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-config-'));
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
  return dir;
}

export const silentLogger = pino({ level: 'silent' });

/** A logger that keeps its JSON lines, to assert on what operators would read. */
export function capturingLogger(level = 'info'): { logger: Logger; lines: () => Record<string, unknown>[] } {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      lines.push(...chunk.toString().split('\n').filter(Boolean));
      done();
    },
  });
  return { logger: pino({ level }, sink), lines: () => lines.map((l) => JSON.parse(l) as Record<string, unknown>) };
}

/** Starts the real service in this process on free ports, with a manual clock. */
export async function startTestService(
  opts: { configDir?: string; args?: string[]; env?: NodeJS.ProcessEnv; tiers?: TierStore; startMs?: number; realClock?: boolean; logger?: Logger } = {},
): Promise<TestService> {
  const clock = new ManualClock(opts.startMs ?? HOUR_START);
  const settings = parseServeArgs(
    [
      '--config',
      opts.configDir ?? 'config',
      '--grpc-port',
      '0',
      '--http-port',
      '0',
      '--admin-port',
      '0',
      '--grpc-host',
      '127.0.0.1',
      '--http-host',
      '127.0.0.1',
      // The `grpc-js` project runs the RLS tests again with every method on grpc-js (GRPC_SERVER, vitest.config.ts).
      ...(process.env.GRPC_SERVER ? ['--grpc-server', process.env.GRPC_SERVER] : []),
      ...(opts.args ?? []),
    ],
    opts.env ?? {},
  );
  const service = await startService(settings, { logger: opts.logger ?? silentLogger, clock: opts.realClock ? undefined : clock, tiers: opts.tiers });
  const rls = new RlsClient(service.grpcPort);
  return {
    service,
    clock,
    rls,
    async close() {
      rls.close();
      await service.stop();
    },
  };
}

/** Sends `n` identical requests one after another and returns the responses. */
export async function repeat(rls: RlsClient, req: RlsRequest, n: number): Promise<RlsResponse[]> {
  const out: RlsResponse[] = [];
  for (let i = 0; i < n; i++) out.push(await rls.call(req));
  return out;
}

export function property(category: string, token?: string): RlsRequest {
  const entries = [{ key: 'category', value: category }];
  if (token !== undefined) entries.push({ key: 'token', value: token });
  return { domain: 'property-api', descriptors: [{ entries }], hits_addend: 0 };
}
