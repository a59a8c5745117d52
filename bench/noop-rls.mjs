// The floor: a rate-limit service on the same gRPC stack as Tollgate (grpc-js, the same protos and loader
// options) that decides nothing: every call gets OK and three fixed headers.
import * as grpc from '@grpc/grpc-js';
import { RLS_SERVICE, serviceDefinition } from '../dist/server/proto.js';
import { NOOP_RESPONSE } from './noop-response.mjs';

const port = Number(process.argv[2] ?? 0);
const response = NOOP_RESPONSE;

const server = new grpc.Server();
server.addService(serviceDefinition(RLS_SERVICE), { ShouldRateLimit: (_call, callback) => callback(null, response) });
server.bindAsync(`127.0.0.1:${port}`, grpc.ServerCredentials.createInsecure(), (err, bound) => {
  if (err) throw err;
  console.log(JSON.stringify({ msg: 'noop serving', grpcPort: bound }));
});
process.on('SIGTERM', () => server.tryShutdown(() => process.exit(0)));
