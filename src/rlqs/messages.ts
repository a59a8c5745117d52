/** The RLQS wire messages as Tollgate reads and writes them, written once: reports as decode.ts gives them, and
 * responses as proto-loader's serializer takes them (keepCase field names; longs as numbers; bytes as Buffers;
 * enums by name). Each interface names its message (`@proto`) and each field its number and type in the proto
 * (`= number: type`), as proto/envoy/service/rate_limit_quota/v3/rlqs.proto and the files it imports declare them;
 * test/unit/rlqs-messages.test.ts holds both to the protos. Fields Tollgate neither reads nor sends are left out. */

/** A BucketId's values as they came (bytes: echoed back exactly, see proto/…/rlqs.proto). */
export type WireBucketId = Record<string, Buffer>;

/** @proto envoy.service.rate_limit_quota.v3.BucketId */
export interface WireBucketIdMessage {
  /** = 1: map<string, bytes> */
  bucket?: WireBucketId;
}

/** @proto envoy.service.rate_limit_quota.v3.RateLimitQuotaUsageReports.BucketQuotaUsage (time_elapsed = 2 is
 * not read: Tollgate measures time on its own clock) */
export interface WireUsage {
  /** = 1: BucketId */
  bucket_id?: WireBucketIdMessage | null;
  /** = 3: uint64 */
  num_requests_allowed?: number;
  /** = 4: uint64 */
  num_requests_denied?: number;
}

/** @proto envoy.service.rate_limit_quota.v3.RateLimitQuotaUsageReports */
export interface WireReport {
  /** = 1: string */
  domain: string;
  /** = 2: repeated BucketQuotaUsage */
  bucket_quota_usages: WireUsage[];
}

/** @proto google.protobuf.Duration */
export interface WireDuration {
  /** = 1: int64 */
  seconds: number;
  /** = 2: int32 */
  nanos?: number;
}

/** @proto google.protobuf.UInt32Value */
export interface WireUInt32 {
  /** = 1: uint32 */
  value: number;
}

/** @proto envoy.type.v3.TokenBucket */
export interface WireTokenBucket {
  /** = 1: uint32 */
  max_tokens: number;
  /** = 2: google.protobuf.UInt32Value */
  tokens_per_fill: WireUInt32;
  /** = 3: google.protobuf.Duration */
  fill_interval: WireDuration;
}

/** @proto envoy.type.v3.RateLimitStrategy (oneof strategy: one of the two is set) */
export interface WireStrategy {
  /** = 1: BlanketRule */
  blanket_rule?: 'ALLOW_ALL' | 'DENY_ALL';
  /** = 3: TokenBucket */
  token_bucket?: WireTokenBucket;
}

/** @proto envoy.service.rate_limit_quota.v3.RateLimitQuotaResponse.BucketAction.QuotaAssignmentAction */
export interface WireAssignmentAction {
  /** = 2: google.protobuf.Duration */
  assignment_time_to_live: WireDuration;
  /** = 3: envoy.type.v3.RateLimitStrategy */
  rate_limit_strategy: WireStrategy;
}

/** @proto envoy.service.rate_limit_quota.v3.RateLimitQuotaResponse.BucketAction.AbandonAction (no fields) */
export type WireAbandonAction = Record<string, never>;

/** @proto envoy.service.rate_limit_quota.v3.RateLimitQuotaResponse.BucketAction (oneof bucket_action: one of
 * the two actions is set) */
export interface WireBucketAction {
  /** = 1: BucketId */
  bucket_id: WireBucketIdMessage;
  /** = 2: QuotaAssignmentAction */
  quota_assignment_action?: WireAssignmentAction;
  /** = 3: AbandonAction */
  abandon_action?: WireAbandonAction;
}

/** @proto envoy.service.rate_limit_quota.v3.RateLimitQuotaResponse */
export interface WireQuotaResponse {
  /** = 1: repeated BucketAction */
  bucket_action: WireBucketAction[];
}
