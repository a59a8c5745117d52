import { Gauge, type Registry } from 'prom-client';
import type { CompiledConfig } from '../config/compiled.js';
import type { DescriptorOutcome } from '../limiter/limiter.js';

/** Windows of budget rules tracked at once, at most: a rule has a window per limit, so this bounds what a
 * config with thousands of rules can make a replica hold. */
const MAX_TRACKED = 10_000;

/** Utilization of budget rules, with labels from the config only (rule names, never values): how full the
 * fullest counter of each rule's window is, from the charges decided here, and the configured limits, so that an
 * alert can say "tenants of rule X are nearing their budget" without a series per tenant (issue 62). */
export class BudgetShare {
  /** Per rule and window: the largest share of its own limit a counter reached, until the window ends. */
  private readonly fullest = new Map<string, { labels: { domain: string; rule: string; window: string }; share: number; untilMs: number }>();

  constructor(registry: Registry, config: () => CompiledConfig, now: () => number = Date.now) {
    const fullest = this.fullest;
    new Gauge({
      name: 'tollgate_budget_fullest_share',
      help:
        "The largest share of its own limit (a tier's for a client in one) any counter of a charge_mode rule has used in the current " +
        'window, as the charges decided by this replica saw it (1 when past it); take the max over replicas',
      labelNames: ['domain', 'rule', 'window'],
      registers: [registry],
      aggregator: 'max',
      collect() {
        this.reset();
        const at = now();
        for (const [key, f] of fullest) {
          if (f.untilMs <= at) fullest.delete(key);
          else this.set(f.labels, f.share);
        }
      },
    });
    new Gauge({
      name: 'tollgate_budget_limit',
      help: "The configured limit of each window of charge_mode and in_flight rules, and of their tiers' (tier is empty for the rule's own)",
      labelNames: ['domain', 'rule', 'window', 'tier'],
      registers: [registry],
      aggregator: 'max',
      collect() {
        this.reset();
        for (const [domain, d] of config().domains) {
          for (const r of d.rules) {
            if (!r.charge && !r.inFlight) continue;
            for (const l of r.limits) this.set({ domain, rule: r.id, window: l.windowName, tier: '' }, l.requestsPerUnit);
            for (const [tier, ls] of r.tierLimits) for (const l of ls) this.set({ domain, rule: r.id, window: l.windowName, tier }, l.requestsPerUnit);
          }
        }
      },
    });
  }

  /** A charge's windows after it: each window's share of its own limit, kept while the window lasts. */
  charged(labels: { domain: string; rule: string }, o: DescriptorOutcome): void {
    for (const w of o.windows) {
      const limit = w.limit.requestsPerUnit;
      if (limit <= 0) continue;
      const share = Math.min(1, Math.max(0, (limit - w.remaining) / limit));
      const key = `${labels.domain}\n${labels.rule}\n${w.limit.windowName}`;
      const f = this.fullest.get(key);
      // The same window (a fixed or calendar one ends when it ends): its fullest so far. A later window starts
      // afresh; a decision of a window already past (it crossed a boundary on its way) changes nothing.
      if (f && f.untilMs === w.resetAtMs) f.share = Math.max(f.share, share);
      else if (f && f.untilMs > w.resetAtMs) continue;
      else if (f || this.fullest.size < MAX_TRACKED) {
        this.fullest.set(key, { labels: { domain: labels.domain, rule: labels.rule, window: w.limit.windowName }, share, untilMs: w.resetAtMs });
      }
    }
  }
}
