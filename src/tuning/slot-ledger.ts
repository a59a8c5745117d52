import type { Rule } from '../config/compiled.js';
import type { Decision } from '../limiter/limiter.js';
import { type LevelSeries, LevelTimeline } from './timeline.js';

/** The slots of in_flight rules over a replay: takes, refusals and give-backs as the limiter answered them, and
 * the slots held at each moment. A slot is held from its take until its give-back, or until its lease ends
 * first: the rule's lease, or with max_hold the take + max_hold (the replay renews slots as a live Envoy's
 * connection has them renewed; limiter/slot-keeper.ts). */

export interface InFlightStats {
  domain: string;
  rule: string;
  /** The rule's limit (a tier may have another). */
  limit: number;
  taken: number;
  refused: number;
  returned: number;
  /** Most slots held at once, over all the rule's counters. */
  peakHeld: number;
}

/** A rule's slots held over the log's time (simulate --report). */
export interface HeldSeries extends LevelSeries {
  domain: string;
  rule: string;
}

interface SlotRule extends InFlightStats {
  held: number;
  timeline: LevelTimeline;
}

/** Slots one request took on one rule: released once, by its give-back or by its lease's end. */
export interface TakenSlots {
  rule: SlotRule;
  count: number;
  /** When the store ends the lease if nothing gives the slots back first. */
  holdEndMs: number;
  released: boolean;
  /** Its lease's end is on the replay's queue. */
  releasing?: boolean;
}

export class SlotLedger {
  private readonly rules = new Map<string, SlotRule>();

  constructor(private readonly originSecond: () => number) {}

  /** The slots a request-phase decision took (each to be released later), counting its refusals. */
  taken(d: Decision, nowMs: number): TakenSlots[] {
    const out: TakenSlots[] = [];
    for (const o of d.descriptors) {
      if (!o.slots || !o.rule?.inFlight) continue;
      const r = this.ruleOf(o.rule);
      if (o.slots.event === 'refused') r.refused++;
      if (o.slots.event !== 'taken' || o.slots.count <= 0) continue;
      r.taken += o.slots.count;
      this.move(r, o.slots.count, nowMs);
      const f = o.rule.inFlight;
      out.push({ rule: r, count: o.slots.count, holdEndMs: nowMs + (f.maxHoldMs ?? f.leaseMs), released: false });
    }
    return out;
  }

  /** A stream-done decision: the slots it gave back are released now. */
  returned(d: Decision, slots: readonly TakenSlots[], nowMs: number): void {
    for (const o of d.descriptors) {
      if (o.slots?.event !== 'returned' || !o.rule?.inFlight) continue;
      const r = this.ruleOf(o.rule);
      r.returned += o.slots.count;
      const s = slots.find((x) => x.rule === r && !x.released);
      if (s && o.slots.count > 0) this.release(s, nowMs);
    }
  }

  release(s: TakenSlots, nowMs: number): void {
    if (s.released) return;
    s.released = true;
    this.move(s.rule, -s.count, nowMs);
  }

  stats(): InFlightStats[] {
    return this.sorted().map(({ domain, rule, limit, taken, refused, returned, peakHeld }) => ({ domain, rule, limit, taken, refused, returned, peakHeld }));
  }

  series(): HeldSeries[] {
    return this.sorted().map((r) => ({ domain: r.domain, rule: r.rule, ...r.timeline.series() }));
  }

  private sorted(): SlotRule[] {
    return [...this.rules.values()].sort((a, b) => a.domain.localeCompare(b.domain) || a.rule.localeCompare(b.rule));
  }

  private move(r: SlotRule, by: number, nowMs: number): void {
    r.held += by;
    r.peakHeld = Math.max(r.peakHeld, r.held);
    r.timeline.set(Math.floor(nowMs / 1000), r.held);
  }

  private ruleOf(rule: Rule): SlotRule {
    const key = `${rule.domain}/${rule.id}`;
    let r = this.rules.get(key);
    if (!r) {
      r = {
        domain: rule.domain,
        rule: rule.id,
        limit: rule.inFlight!.limit,
        taken: 0,
        refused: 0,
        returned: 0,
        peakHeld: 0,
        held: 0,
        timeline: new LevelTimeline(this.originSecond()),
      };
      this.rules.set(key, r);
    }
    return r;
  }
}
