import { Counter, Gauge, type Registry } from 'prom-client';
import type { CensusEvents, RuleCensus } from '../limiter/slot-census.js';
import type { KeeperEvents } from '../limiter/slot-keeper.js';
import type { FastCounter } from './series.js';

/** What in-flight slots do between calls: renewals of rules with max_hold (limiter/slot-keeper.ts), and the
 * census that reads what is held in the store (limiter/slot-census.ts). Labels are rule names, never values. */
export class InFlightMetrics {
  readonly renewals: Counter<'outcome'>;
  readonly censusFailures: Counter;
  /** The census the held gauges read at each scrape. */
  private census: () => RuleCensus[] = () => [];

  constructor(
    registry: Registry,
    /** tollgate_in_flight_slots_total (budget-metrics.ts): the census counts ended leases there, as `expired`. */
    private readonly slots: FastCounter,
  ) {
    this.renewals = new Counter({
      name: 'tollgate_in_flight_renewals_total',
      help:
        'Slots of rules with max_hold, by outcome: renewed (a lease more: its Envoy is connected), dropped (from the lists renewed: ' +
        'given back, lease ended, or at max_hold), unlisted (a list at its bound: the slot keeps one lease); ' +
        'note_failed, renew_failed, move_failed: store calls of the keeper that failed',
      labelNames: ['outcome'],
      registers: [registry],
    });
    this.censusFailures = new Counter({
      name: 'tollgate_in_flight_census_failures_total',
      help: 'Store calls of the in-flight census that failed (a rule not counted, or a take not listed for it)',
      registers: [registry],
    });
    this.gauge(registry, 'tollgate_in_flight_held', 'In-flight slots held now by rule, over every replica, as the last census read them', (c) => c.census.held);
    this.gauge(
      registry,
      'tollgate_in_flight_fullest_share',
      "The largest share of its own limit a counter of the rule holds (a tier's limit for a client in one), as the last census read it",
      (c) => (c.census.top[0] ? c.census.top[0].held / c.census.top[0].limit : 0),
    );
  }

  /** The census's events: ended leases counted as `expired` by rule. */
  censusEvents(all: () => RuleCensus[]): CensusEvents {
    this.census = all;
    return {
      counted: (c) => {
        const labels = { domain: c.domain, rule: c.rule.id, category: c.rule.category, event: 'expired' };
        if (c.census.expired > 0) this.slots.labels(labels).inc(c.census.expired);
      },
      failed: () => this.censusFailures.inc(),
    };
  }

  /** The slot keeper's events. */
  keeper(): KeeperEvents {
    return {
      renewed: (r) => {
        if (r.renewed) this.renewals.inc({ outcome: 'renewed' }, r.renewed);
        if (r.dropped) this.renewals.inc({ outcome: 'dropped' }, r.dropped);
      },
      unlisted: (n) => this.renewals.inc({ outcome: 'unlisted' }, n),
      failed: (what) => this.renewals.inc({ outcome: `${what}_failed` }),
    };
  }

  /** A gauge per rule, from the last census (the same on every replica: dashboards take the max). */
  private gauge(registry: Registry, name: string, help: string, read: (c: RuleCensus) => number): void {
    const census = (): RuleCensus[] => this.census();
    new Gauge({
      name,
      help,
      labelNames: ['domain', 'rule'],
      registers: [registry],
      aggregator: 'max',
      collect() {
        this.reset();
        for (const c of census()) this.set({ domain: c.domain, rule: c.rule.id }, read(c));
      },
    });
  }
}
