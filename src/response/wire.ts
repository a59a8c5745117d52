import type { WireStruct } from './metadata.js';

/** RateLimitResponse as @grpc/proto-loader (keepCase) encodes it. Field names are the .proto's. */

export const Code = { UNKNOWN: 0, OK: 1, OVER_LIMIT: 2 } as const;
export const CODE_NAMES = ['UNKNOWN', 'OK', 'OVER_LIMIT'] as const;
export const UNIT_CODE_NAMES = ['UNKNOWN', 'SECOND', 'MINUTE', 'HOUR', 'DAY', 'MONTH', 'YEAR', 'WEEK'] as const;

export interface WireHeader {
  key: string;
  value: string;
}

export interface WireDuration {
  seconds: number;
  nanos: number;
}

export interface WireStatus {
  code: number;
  current_limit?: { name: string; requests_per_unit: number; unit: number };
  limit_remaining: number;
  duration_until_reset?: WireDuration;
}

export interface WireResponse {
  overall_code: number;
  statuses: WireStatus[];
  response_headers_to_add: WireHeader[];
  request_headers_to_add: WireHeader[];
  raw_body?: Buffer;
  /** RESPONSE_DYNAMIC_METADATA only (response/metadata.ts); encoded by protobufjs, not rls/rls-codec.ts. */
  dynamic_metadata?: WireStruct;
}

export function durationFromMs(ms: number): WireDuration {
  const clamped = Math.max(0, Math.round(ms));
  return { seconds: Math.floor(clamped / 1000), nanos: (clamped % 1000) * 1_000_000 };
}
