import type { RlqsMetrics } from '../metrics/rlqs-metrics.js';
import { type AssignmentSummary, MAX_RULES } from '../response/assignment-summary.js';
import { UNKNOWN_DOMAIN } from './deps.js';
import type { Strategy } from './quota/strategy.js';
import type { ReadReport, StreamBucket } from './stream-buckets.js';

/** What an answer counts: its actions by strategy, for the metric and for the summary its span and decision-log
 * line show (response/assignment-summary.ts). */

/** A bucket with the strategy it is told. */
export interface Assigned {
  b: StreamBucket;
  s: Strategy;
}

export type Tally = AssignmentSummary['strategies'];

const STRATEGY_LABEL = { bucket: 'token_bucket', allow: 'allow_all', deny: 'deny_all' } as const;

/** The actions of one answer by strategy, as the metric and the summary count them. */
export function tally(assigned: readonly Assigned[], overflow: number, abandon: number): Tally {
  const counts = { token_bucket: 0, allow_all: overflow, deny_all: 0, abandon };
  for (const { s } of assigned) counts[STRATEGY_LABEL[s.kind]]++;
  return counts;
}

/** What the span and the decision-log line of an answer say, `domain` being its metric label. */
export function summarize(domain: string, instance: string, read: ReadReport, sent: readonly Assigned[], failure: string | undefined): AssignmentSummary {
  const denyRules = new Set<string>();
  for (const { b, s } of sent) if (s.kind === 'deny' && b.plan.rule && denyRules.size < MAX_RULES) denyRules.add(b.plan.rule.id);
  return {
    domain: domain === UNKNOWN_DOMAIN ? undefined : domain,
    instance,
    buckets: read.buckets.length + read.abandon.length + read.overflow.length,
    allowed: read.allowed,
    denied: read.denied,
    strategies: tally(sent, read.overflow.length, read.abandon.length),
    denyRules: [...denyRules],
    ...(failure && { failure }),
  };
}

/** Counts an answer's actions by domain and strategy. */
export function countActions(m: RlqsMetrics, domain: string, counts: Tally): void {
  for (const [strategy, n] of Object.entries(counts)) if (n > 0) m.assignments.inc({ domain, strategy }, n);
}

/** Counts what a report's read found: requests by result, buckets refused by why. */
export function countRead(m: RlqsMetrics, domain: string, read: ReadReport): void {
  if (read.allowed > 0) m.reported.inc({ domain, result: 'allowed' }, read.allowed);
  if (read.denied > 0) m.reported.inc({ domain, result: 'denied' }, read.denied);
  for (const [reason, n] of Object.entries(read.refused)) if (n > 0) m.refused.inc({ reason }, n);
  if (read.idle > 0) m.refused.inc({ reason: 'idle' }, read.idle);
}
