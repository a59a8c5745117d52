import { Counter, type Registry } from 'prom-client';
import type { DescriptorOutcome } from '../limiter/limiter.js';
import type { BudgetShare } from './budget-share.js';
import { InFlightMetrics } from './in-flight-metrics.js';
import { type CounterSeries, cachedSeries, FastCounter } from './series.js';

type Labels = { domain: string; rule: string; category: string };

/** What budgets do, by rule: charges (charge_mode), reservations, refunds (Envoy 1.38's is_negative_hits)
 * and in-flight slots. Rare next to decisions, so a rule's series are made on its first use. */
export class BudgetMetrics {
  readonly charged: FastCounter;
  readonly reservations: FastCounter;
  readonly refunded: FastCounter;
  readonly refundsIgnored: FastCounter;
  readonly inFlight: FastCounter;
  readonly reservationsExpired: Counter;
  /** Renewals and the census (in-flight-metrics.ts). */
  readonly slots: InFlightMetrics;
  readonly reserved: FastCounter;
  /** How full each budget rule's fullest counter is (budget-share.ts), once the config is known. */
  share: BudgetShare | undefined;

  constructor(registry: Registry) {
    this.charged = new FastCounter(
      'tollgate_charged_hits_total',
      'Hits counted by charges (charge_mode: a charge, or what a settlement added; a refund is not subtracted), by rule',
      registry,
    );
    this.reservations = new FastCounter(
      'tollgate_reservations_total',
      'Reservations by rule and event: made, refused (did not fit), settled, late (settled after a refusal or twice: nothing counted), ' +
        'full (the bound of open reservations), unreserved (a settlement that found none: charged in full)',
      registry,
    );
    this.refunded = new FastCounter(
      'tollgate_refunded_hits_total',
      "Hits given back by refunds (Envoy's is_negative_hits), by rule: what the windows held and gave, never more than was counted",
      registry,
    );
    this.refundsIgnored = new FastCounter(
      'tollgate_refunds_ignored_total',
      "Refunds (Envoy's is_negative_hits) a rule with refunds: false did not take, by rule: " +
        'each answered OK with nothing checked (a stream end), nothing given back',
      registry,
    );
    this.inFlight = new FastCounter(
      'tollgate_in_flight_slots_total',
      'In-flight slots by rule and event: taken, returned (given back), expired (their lease ran out); refused: takes with no slot free, one each; ' +
        'held = taken - returned - expired, summed over replicas',
      registry,
    );
    this.reservationsExpired = new Counter({
      name: 'tollgate_reservations_expired_total',
      help: 'Reservations forgotten unsettled after their reservation_ttl (they stay charged at their estimate), as the store found them',
      registers: [registry],
    });
    this.slots = new InFlightMetrics(registry, this.inFlight);
    this.reserved = new FastCounter(
      'tollgate_reserved_hits_total',
      'Hits reserved by rule: the estimates of the reservations made (a settlement then counts what the work cost; tollgate_charged_hits_total)',
      registry,
    );
  }

  /** One descriptor's charge, reservation, refund or slots; `children` caches its series by event. */
  observe(children: Map<string, CounterSeries>, labels: Labels, o: DescriptorOutcome): void {
    const child = (key: string, make: () => CounterSeries): CounterSeries => cachedSeries(children, key, make);
    if (o.charged !== undefined && o.charged > 0) child('charged', () => this.charged.labels(labels)).inc(o.charged);
    if (o.refunded) child('refunded', () => this.refunded.labels(labels)).inc(o.refunded);
    if (o.refundIgnored) child('refundIgnored', () => this.refundsIgnored.labels(labels)).inc();
    const event = o.reservation?.event;
    if (event) child(event, () => this.reservations.labels({ ...labels, event })).inc();
    if (event === 'made' && o.reservation!.estimate > 0) child('reserved', () => this.reserved.labels(labels)).inc(o.reservation!.estimate);
    if (o.charged !== undefined || o.refunded !== undefined || event) this.share?.charged(labels, o);
    const slots = o.slots;
    if (!slots) return;
    if (slots.count > 0) child(`slots.${slots.event}`, () => this.inFlight.labels({ ...labels, event: slots.event })).inc(slots.count);
    if (slots.expired > 0) child('slots.expired', () => this.inFlight.labels({ ...labels, event: 'expired' })).inc(slots.expired);
  }
}
