// The floor of Node itself: a node:http2 server that answers every ShouldRateLimit call with one response
// framed up front (the same OK and three headers as bench/noop-rls.mjs), with no gRPC library and no
// protobuf work per call.
//   node bench/raw-noop.mjs PORT
import { createServer } from 'node:http2';
import { RLS_SERVICE, serviceDefinition } from '../dist/server/proto.js';
import { NOOP_RESPONSE } from './noop-response.mjs';

const body = serviceDefinition(RLS_SERVICE).ShouldRateLimit.responseSerialize(NOOP_RESPONSE);
const frame = Buffer.alloc(5 + body.length);
frame.writeUInt32BE(body.length, 1);
body.copy(frame, 5);

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
