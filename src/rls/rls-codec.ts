/** The two RLS messages on the hot path, read and written by hand: RateLimitRequest decoded straight into
 * the plain object the handler reads (one pass that also rejects what is not a well-formed request), and
 * RateLimitResponse written straight into one Buffer. protobufjs builds message objects, Readers and
 * Writers per call; this does neither. Field numbers are the .proto's (proto/envoy/...); the property test
 * in test/unit/rls-codec.test.ts holds both directions to protobufjs byte for byte. */
export { type DecodeBounds, decodeRateLimitRequest, UndecodableRequest } from './rls-decode.js';
export { encodable, encodeRateLimitResponse, withGrpcPrefix } from './rls-encode.js';
