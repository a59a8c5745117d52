import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InstanceRegistry } from '../../src/rlqs/identity.js';
import type { QuotaService } from '../../src/rlqs/quota/quota-service.js';
import { rlqsService } from '../../src/rlqs/service.js';
import { RLQS_SERVICE, serviceDefinition } from '../../src/server/proto.js';
import { SimEnvoy } from '../helpers/envoy-rlqs.js';
import { capturingLogger } from '../helpers/service.js';
import { within } from '../helpers/time.js';

// A bug in handling a report (here: a planner that throws) ends that stream with INTERNAL and one log line, and
// nothing else: no unhandled rejection, the server goes on serving other streams. The planner is the only fake.

const log = capturingLogger('info');
let server: grpc.Server;
let port: number;
let failing = true;

beforeAll(async () => {
  const quota = {
    ttlSeconds: 3,
    plan: () => {
      if (failing) throw new RangeError('a bug');
      return { config: {}, entries: [], rule: undefined, tier: undefined, fixed: { kind: 'allow' }, shareKey: '', rates: [], rlsWindows: [], quotas: [] };
    },
    watch: () => () => undefined,
    unavailable: () => undefined,
    assign: async (_i: string, usages: unknown[]) => ({ strategies: usages.map(() => ({ kind: 'allow' })), failure: undefined }),
  } as unknown as QuotaService;
  const limits = { bounds: { maxEntries: 8, maxValueBytes: 1024 }, maxBuckets: 100, reportIntervalMs: 1000, idleReports: 12 };
  const rlqs = rlqsService({ quota, instances: new InstanceRegistry(), limits, logger: log.logger, domainLabel: () => '(unknown)' });
  server = new grpc.Server();
  server.addService(serviceDefinition(RLQS_SERVICE), rlqs.implementation);
  port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
});
afterAll(() => server?.forceShutdown());

describe('an internal error in an RLQS stream', () => {
  it('ends that stream with INTERNAL, logs its class once, and the next stream is served', async () => {
    const broken = new SimEnvoy({ ports: [port], localAddress: '127.0.0.80', domain: 'd', reportIntervalMs: 60_000 });
    broken.request({ k: 'v' });
    await within(5000, () => broken.statuses.length > 0, 'a status');
    expect(broken.statuses).toEqual(['13']);
    const lines = log.lines().filter((l) => l.msg === 'rlqs stream failed on an internal error; ended');
    expect(lines.map((l) => l.err)).toEqual(['RangeError']);
    broken.close();
    failing = false;
    const next = new SimEnvoy({ ports: [port], localAddress: '127.0.0.81', domain: 'd', reportIntervalMs: 60_000 });
    next.request({ k: 'v' });
    await within(5000, () => next.received.length > 0, 'an answer on the next stream');
    next.close();
  });
});
