import type { WireBucketAction, WireBucketId, WireDuration, WireQuotaResponse } from './messages.js';
import { type Strategy, wireStrategy } from './quota/strategy.js';

/** The actions of an answer as they go on the wire (messages.ts), and the messages they go in. */

/** Actions in one response message, so one answer never nears a 4 MiB message limit. */
export const ACTIONS_PER_MESSAGE = 10_000;

/** A bucket's strategy, with a TTL: Envoy keeps it that long unless told again. */
export function assignAction(id: WireBucketId, s: Strategy, ttl: WireDuration): WireBucketAction {
  return {
    bucket_id: { bucket: id },
    quota_assignment_action: { assignment_time_to_live: ttl, rate_limit_strategy: wireStrategy(s) },
  };
}

/** Envoy drops the bucket (it makes it anew at its next request). */
export function abandonAction(id: WireBucketId): WireBucketAction {
  return { bucket_id: { bucket: id }, abandon_action: {} };
}

/** The actions in messages of at most ACTIONS_PER_MESSAGE each, in order. */
export function responses(actions: readonly WireBucketAction[]): WireQuotaResponse[] {
  const out: WireQuotaResponse[] = [];
  for (let i = 0; i < actions.length; i += ACTIONS_PER_MESSAGE) out.push({ bucket_action: actions.slice(i, i + ACTIONS_PER_MESSAGE) });
  return out;
}
