import { KIND_CODES, kindOf } from '../limits/kinds/index.js';
import type { Algorithm, DescriptorSpec, DomainSpec, LimitSpec } from './spec.js';

/** USE_CALENDAR_MONTH_RATE_LIMIT=true, as envoyproxy/ratelimit reads it (PR #1206, merged 2026-08-06:
 * src/utils/utilities.go and time.go): a MONTH limit counts in the UTC calendar month, and says the time to the
 * month's end as its reset, instead of 30 days from the epoch. Here, every fixed-window `unit: month` limit that
 * does not say `calendar` becomes a calendar month (`calendar: true`), in files and from xDS alike, its tiers'
 * too; a domain so read marks Envoy's own MONTH limits the same way (limiter/plan.ts). A kind without calendar
 * windows (sliding windows, buckets; envoyproxy/ratelimit has neither) stays as it is. */
export function calendarMonths(specs: DomainSpec[]): void {
  for (const spec of specs) {
    spec.calendarMonths = true;
    for (const d of spec.descriptors) descriptor(d, spec.algorithm);
  }
}

function descriptor(d: DescriptorSpec, domainAlgorithm: Algorithm): void {
  const algorithm = d.algorithm ?? domainAlgorithm;
  for (const l of d.limits) month(l, algorithm);
  for (const ls of d.tierLimits.values()) for (const l of ls) month(l, algorithm);
  for (const child of d.children) descriptor(child, domainAlgorithm);
}

function month(l: LimitSpec, ruleAlgorithm: Algorithm): void {
  if (l.unit === 'month' && l.calendar === undefined && kindOf(KIND_CODES[l.algorithm ?? ruleAlgorithm]).calendar) l.calendar = true;
}
