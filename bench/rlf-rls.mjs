// The peer a Node team would write by hand: a rate-limit service on grpc-js with the same protos, decoded and
// encoded as @grpc/proto-loader does (protobufjs), counting each request on rate-limiter-flexible: one limiter
// like the bench domain's rule (a limit no run reaches, per hour), in memory or in Redis (RateLimiterRedis over
// ioredis), keyed by the domain and descriptor entries; it answers as Tollgate does, OK with a status and the
// three X-RateLimit headers.
//   node bench/rlf-rls.mjs PORT [REDIS_PORT]
import * as grpc from '@grpc/grpc-js';
import { Redis } from 'ioredis';
import { RateLimiterMemory, RateLimiterRedis } from 'rate-limiter-flexible';
import { clientConstructor, RLS_SERVICE } from '../dist/server/proto.js';

const [port, redisPort] = process.argv.slice(2).map(Number);
const POINTS = 4_000_000_000;
const options = { points: POINTS, duration: 3600, keyPrefix: 'rlf' };
const limiter = redisPort ? new RateLimiterRedis({ ...options, storeClient: new Redis(redisPort, '127.0.0.1') }) : new RateLimiterMemory(options);
const LIMIT = { requests_per_unit: POINTS, unit: 4 }; // HOUR

function answer(code, r) {
  const reset = Math.ceil(r.msBeforeNext / 1000);
  return {
    overall_code: code,
    statuses: [{ code, current_limit: LIMIT, limit_remaining: r.remainingPoints, duration_until_reset: { seconds: reset } }],
    response_headers_to_add: [
      { key: 'X-RateLimit-Limit', value: String(POINTS) },
      { key: 'X-RateLimit-Remaining', value: String(r.remainingPoints) },
      { key: 'X-RateLimit-Reset', value: String(reset) },
    ],
  };
}

const server = new grpc.Server();
server.addService(clientConstructor(RLS_SERVICE).service, {
  ShouldRateLimit: (call, callback) => {
    const req = call.request;
    const key = `${req.domain}|${req.descriptors.map((d) => d.entries.map((e) => `${e.key}=${e.value}`).join(',')).join('|')}`;
    limiter.consume(key, Math.max(1, req.hits_addend || 1)).then(
      (r) => callback(null, answer(1, r)),
      (r) => (r instanceof Error ? callback({ code: grpc.status.UNAVAILABLE, details: 'store' }) : callback(null, answer(2, r))),
    );
  },
});
server.bindAsync(`127.0.0.1:${port}`, grpc.ServerCredentials.createInsecure(), (err, bound) => {
  if (err) throw err;
  console.log(JSON.stringify({ msg: 'rlf serving', grpcPort: bound }));
});
process.on('SIGTERM', () => server.tryShutdown(() => process.exit(0)));
