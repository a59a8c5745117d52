import { Gauge, type Registry } from 'prom-client';
import type { CompiledConfig } from '../config/compiled.js';
import type { DescriptorOutcome } from '../limiter/limiter.js';
import { ALGORITHMS } from '../limits/kinds/index.js';

/** Windows of budget rules followed at once, at most: a rule has a window per limit, and a reload starts them
 * afresh, so this bounds what a config of thousands of rules can make a replica hold. */
const MAX_WINDOWS = 10_000;
/** Counters followed per window, at most: the fullest ones (a fuller one takes the place of the least full). */
const MAX_COUNTERS = 100;

/** A rule's window: its fullest counters, each as of its latest charge here, until that charge's window ends. */
interface Followed {
  labels: { domain: string; rule: string; window: string };
  counters: Map<string, { share: number; untilMs: number }>;
}

/** Utilization of budget rules, with labels from the config only (rule names, never values): how full the
 * fullest counter of each rule's window is, from the charges decided here, and the configured limits, so that an
 * alert can say "tenants of rule X are nearing their budget" without a series per tenant (issue 62). A counter's
 * share is its latest charge's (a refund, a larger tier or a new window lower it), by its own limit's capacity
 * (a tier's; a bucket's burst). Counter keys are fingerprints, and stay in this process. */
export class BudgetShare {
  private readonly windows = new Map<string, Followed>();
  /** The config the windows were followed under: a reload starts them afresh (limits and rules may differ). */
  private followedUnder: CompiledConfig | undefined;

  constructor(
    registry: Registry,
    private readonly config: () => CompiledConfig,
    private readonly now: () => number = Date.now,
  ) {
    const fullest = (): [Followed['labels'], number][] => this.fullest();
    new Gauge({
      name: 'tollgate_budget_fullest_share',
      help:
        "The largest share of its own limit (a tier's for a client in one) any counter of a charge_mode rule holds in its current window, " +
        'as of its latest charge decided by this replica (1 when past it); take the max over replicas',
      labelNames: ['domain', 'rule', 'window'],
      registers: [registry],
      aggregator: 'max',
      collect() {
        this.reset();
        for (const [labels, share] of fullest()) this.set(labels, share);
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

  /** A charge's windows after it: each counter's share of its own limit, until its window ends. */
  charged(labels: { domain: string; rule: string }, o: DescriptorOutcome): void {
    if (o.shadow) return; // a shadow rule refuses nobody: nobody is about to run out
    const config = this.config();
    if (config !== this.followedUnder) {
      this.windows.clear();
      this.followedUnder = config;
    }
    for (const w of o.windows) {
      const capacity = ALGORITHMS[w.limit.kind]!.capacity(w.limit);
      if (!(capacity > 0)) continue;
      const share = Math.min(1, Math.max(0, (capacity - w.remaining) / capacity));
      const key = `${labels.domain}\n${labels.rule}\n${w.limit.windowName}`;
      let f = this.windows.get(key);
      if (!f) {
        if (this.windows.size >= MAX_WINDOWS) continue;
        f = { labels: { domain: labels.domain, rule: labels.rule, window: w.limit.windowName }, counters: new Map() };
        this.windows.set(key, f);
      }
      follow(f.counters, w.counter, { share, untilMs: w.resetAtMs }, this.now());
    }
  }

  /** Each followed window's fullest share now; windows whose counters' charges have all ended go. */
  private fullest(): [Followed['labels'], number][] {
    const at = this.now();
    const out: [Followed['labels'], number][] = [];
    for (const [key, f] of this.windows) {
      let max = -1;
      for (const [counter, c] of f.counters) {
        if (c.untilMs <= at) f.counters.delete(counter);
        else max = Math.max(max, c.share);
      }
      if (max < 0) this.windows.delete(key);
      else out.push([f.labels, max]);
    }
    return out;
  }
}

/** A counter's latest share in its window; at the bound, it takes the place of the least full (or of one whose
 * window has ended), if it is fuller. */
function follow(counters: Map<string, { share: number; untilMs: number }>, counter: string, now: { share: number; untilMs: number }, nowMs: number): void {
  if (counters.has(counter) || counters.size < MAX_COUNTERS) {
    counters.set(counter, now);
    return;
  }
  let least: string | undefined;
  let leastShare = Infinity;
  for (const [k, c] of counters) {
    const s = c.untilMs <= nowMs ? -1 : c.share;
    if (s < leastShare) {
      least = k;
      leastShare = s;
    }
  }
  if (least !== undefined && leastShare < now.share) {
    counters.delete(least);
    counters.set(counter, now);
  }
}
