// The floor of Node itself: a node:http2 server that answers every ShouldRateLimit call with one response
// framed up front (the same OK and three headers as bench/noop-rls.mjs), with no gRPC library and no
// protobuf work per call.
//   node bench/raw-noop.mjs PORT
import { createServer } from 'node:http2';
import { withGrpcPrefix } from '../dist/rls/rls-codec.js';
import { RLS_SERVICE, serviceDefinition } from '../dist/server/proto.js';
import { NOOP_RESPONSE } from './noop-response.mjs';

const frame = withGrpcPrefix(serviceDefinition(RLS_SERVICE).ShouldRateLimit.responseSerialize(NOOP_RESPONSE));

const server = createServer();
server.on('stream', (stream) => {
  stream.on('data', () => undefined);
  stream.on('error', () => undefined);
  stream.on('end', () => {
    stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
    stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
    stream.end(frame);
  });
});
server.listen(Number(process.argv[2] ?? 0), '127.0.0.1', () => {
  console.log(JSON.stringify({ msg: 'raw noop serving', grpcPort: server.address().port }));
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
