import { MAX_UINT32 } from '../../config/units.js';
import type { WireStrategy } from '../messages.js';

/** What Envoy's rate_limit_quota filter is told to do with one bucket (a RateLimitStrategy), and how a share
 * of a rate becomes one. Facts from Envoy's source (docs/design/rlqs-envoy.md §3): the filter refills a token
 * bucket continuously at tokens_per_fill / fill_interval, the interval truncated to whole seconds (under 1 s it
 * divides by zero: unlimited); an unset tokens_per_fill reads as 0 (never refills); a re-sent bucket equal in
 * max_tokens, tokens_per_fill and fill_interval.nanos (seconds are not compared) keeps its tokens, a different
 * one starts at the old one's share of remaining tokens (global_client_impl.cc createTokenBucketFromAction). */

export type Strategy =
  | { kind: 'allow' }
  | { kind: 'deny' }
  | {
      kind: 'bucket';
      maxTokens: number;
      tokensPerFill: number;
      /** Whole seconds, ≥ 1. */
      fillSeconds: number;
    };

export const ALLOW: Strategy = { kind: 'allow' };
export const DENY: Strategy = { kind: 'deny' };

/** Tokens one fill should hold at least, so that rounding a rate down to whole tokens costs under 1 %. Envoy
 * refills continuously, so a longer interval changes nothing but the rate's resolution. */
const MIN_TOKENS_PER_FILL = 100;
/** The longest fill interval: a share under one request a day still gets one a day (never DENY_ALL). */
const MAX_FILL_SECONDS = 86_400;

/** A rate in requests a second, as a token bucket Envoy enforces at no more than that rate: one second's worth
 * (a longer interval for a smaller rate, so a fill holds a hundred tokens), rounded down. Its capacity is one second of
 * the rate (at least one token), or `maxBurst` if less. A share under one request a day is one a day. */
export function bucketFor(ratePerSecond: number, maxBurst = Infinity): Strategy {
  if (!(ratePerSecond > 0)) return DENY;
  if (ratePerSecond === Infinity) return ALLOW;
  const fillSeconds = Math.min(MAX_FILL_SECONDS, Math.max(1, Math.ceil(MIN_TOKENS_PER_FILL / ratePerSecond)));
  const tokens = Math.max(1, Math.min(MAX_UINT32, Math.floor(ratePerSecond * fillSeconds)));
  const burst = Math.min(tokens, Math.ceil(ratePerSecond), Math.floor(maxBurst));
  return { kind: 'bucket', maxTokens: Math.max(1, burst), tokensPerFill: tokens, fillSeconds };
}

/** The rate a strategy admits at most, in requests a second (Infinity for ALLOW_ALL). */
export function rateOf(s: Strategy): number {
  return s.kind === 'allow' ? Infinity : s.kind === 'deny' ? 0 : s.tokensPerFill / s.fillSeconds;
}

export function sameStrategy(a: Strategy | undefined, b: Strategy): boolean {
  if (!a || a.kind !== b.kind) return false;
  if (a.kind !== 'bucket' || b.kind !== 'bucket') return true;
  return a.maxTokens === b.maxTokens && a.tokensPerFill === b.tokensPerFill && a.fillSeconds === b.fillSeconds;
}

/** The wire form (envoy.type.v3.RateLimitStrategy, as proto-loader's object: messages.ts). The fill interval's nanos carry
 * its seconds again (a few nanoseconds, which Envoy's whole-second rate ignores): Envoy's equality check
 * reads only nanos, so without them a change of interval alone would keep the old bucket at the old rate. */
export function wireStrategy(s: Strategy): WireStrategy {
  // ALLOW_ALL is the enum's 0: set as a name so the oneof case is on the wire (unset, Envoy discards the action).
  if (s.kind !== 'bucket') return { blanket_rule: s.kind === 'allow' ? 'ALLOW_ALL' : 'DENY_ALL' };
  return {
    token_bucket: {
      max_tokens: s.maxTokens,
      tokens_per_fill: { value: s.tokensPerFill },
      fill_interval: { seconds: s.fillSeconds, nanos: s.fillSeconds },
    },
  };
}
