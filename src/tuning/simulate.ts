import type { CompiledConfig } from '../config/compiled.js';
import type { TierAssignment } from '../control/tier-store.js';
import { ManualClock } from '../counters/clock.js';
import type { EnvoyRateLimitSetup } from '../envoy/routes.js';
import { descriptorsFor } from '../envoy/routes.js';
import { cachedFingerprint } from '../fingerprint.js';
import { Limiter } from '../limiter/limiter.js';
import type { TierSource } from '../limiter/plan.js';
import { MemoryStore } from '../store/memory-store.js';
import { type Series, Timeline } from './timeline.js';
import type { TrafficLine } from './traffic.js';

/** Replays traffic through the service's own matching and limiter code, on a virtual clock that follows the
 * log's timestamps, with the memory store (one replica's exact view). */

export interface RuleStats {
  domain: string;
  rule: string;
  category: string;
  requests: number;
  admitted: number;
  rejected: number;
  /** Most requests in any one second of the log, and most admitted. */
  peakPerSecond: number;
  peakAdmittedPerSecond: number;
}

export interface TokenStats {
  fingerprint: string;
  requests: number;
  rejected: number;
}

export interface SimulationReport {
  lines: number;
  /** Requests no route sends to the rate-limit service. */
  notLimited: number;
  admitted: number;
  rejected: number;
  rules: RuleStats[];
  topLimited: TokenStats[];
}

interface RuleCounter extends RuleStats {
  second: number;
  inSecond: number;
  admittedInSecond: number;
  timeline: Timeline;
}

/** A rule's requests and admitted requests over the log's time (simulate --report). */
export interface RuleSeries extends Series {
  domain: string;
  rule: string;
  category: string;
}

const NO_RULE = '(none)';

export class Simulation {
  private readonly clock = new ManualClock(0);
  private readonly limiter: Limiter;
  private readonly rules = new Map<string, RuleCounter>();
  private readonly tokens = new Map<string, TokenStats>();
  /** Fingerprint of a stand-in value → the fingerprint the log gave (for logs without tokens). */
  private readonly standIns = new Map<string, string>();
  private lines = 0;
  /** The log's first second: where every rule's timeline starts, so their charts share an axis. */
  private firstSecond: number | undefined;
  private notLimited = 0;
  private admitted = 0;
  private rejected = 0;

  constructor(
    config: CompiledConfig,
    private readonly envoy: EnvoyRateLimitSetup,
    assignments: readonly TierAssignment[] = [],
  ) {
    const byFingerprint = new Map(assignments.map((a) => [a.fingerprint, a.tier]));
    const tiers: TierSource = { tierOf: (fp) => byFingerprint.get(this.standIns.get(fp) ?? fp) };
    const store = new MemoryStore({ clock: this.clock, maxCounters: 10_000_000 });
    this.limiter = new Limiter({ config: () => config, store, tiers, clock: this.clock });
  }

  async feed(line: TrafficLine): Promise<void> {
    this.lines++;
    // Logs are written as requests finish, so times can step back a little: the clock never does.
    if (line.timeMs > this.clock.now()) this.clock.set(line.timeMs);
    const { token, fingerprint } = this.tokenOf(line);
    const descriptors = descriptorsFor(this.envoy, { method: line.method, path: line.path, headers: { authorization: token } });
    if (descriptors.length === 0) {
      this.notLimited++;
      return;
    }
    // A line's cost (hits_addend) is charged as Envoy would send it: 0 checks only.
    const cost = line.cost ?? 1;
    const d = await this.limiter.decide({
      domain: this.envoy.domain,
      descriptors: descriptors.map((entries) => (cost === 1 ? { entries } : { entries, hits: cost })),
      hits: Math.max(cost, 1),
    });
    if (d.overLimit) this.rejected++;
    else this.admitted++;
    const second = Math.floor(this.clock.now() / 1000);
    for (const o of d.descriptors) this.count(o.rule?.domain ?? this.envoy.domain, o.rule?.id ?? NO_RULE, o.rule?.category ?? '', !d.overLimit, second);
    if (fingerprint) {
      let t = this.tokens.get(fingerprint);
      if (!t) {
        t = { fingerprint, requests: 0, rejected: 0 };
        this.tokens.set(fingerprint, t);
      }
      t.requests++;
      if (d.overLimit) t.rejected++;
    }
  }

  report(top = 10): SimulationReport {
    const rules = [...this.rules.values()].map((r) => ({
      domain: r.domain,
      rule: r.rule,
      category: r.category,
      requests: r.requests,
      admitted: r.admitted,
      rejected: r.rejected,
      peakPerSecond: Math.max(r.peakPerSecond, r.inSecond),
      peakAdmittedPerSecond: Math.max(r.peakAdmittedPerSecond, r.admittedInSecond),
    }));
    rules.sort((a, b) => a.domain.localeCompare(b.domain) || a.rule.localeCompare(b.rule));
    const topLimited = [...this.tokens.values()]
      .filter((t) => t.rejected > 0)
      .sort((a, b) => b.rejected - a.rejected)
      .slice(0, top);
    return { lines: this.lines, notLimited: this.notLimited, admitted: this.admitted, rejected: this.rejected, rules, topLimited };
  }

  /** Every rule's timeline, in the report's rule order. */
  series(): RuleSeries[] {
    return [...this.rules.values()]
      .sort((a, b) => a.domain.localeCompare(b.domain) || a.rule.localeCompare(b.rule))
      .map((r) => ({ domain: r.domain, rule: r.rule, category: r.category, ...r.timeline.series() }));
  }

  /** The Authorization value to replay and the fingerprint to report. A log with fingerprints only gets a
   * stand-in value per fingerprint: counters only need values to be distinct. */
  private tokenOf(line: TrafficLine): { token?: string; fingerprint?: string } {
    if (line.authorization !== undefined) return { token: line.authorization, fingerprint: cachedFingerprint(line.authorization) };
    if (line.fingerprint === undefined) return {};
    const standIn = `fingerprint:${line.fingerprint}`;
    this.standIns.set(cachedFingerprint(standIn), line.fingerprint);
    return { token: standIn, fingerprint: line.fingerprint };
  }

  private count(domain: string, rule: string, category: string, admitted: boolean, second: number): void {
    const key = `${domain}/${rule}`;
    let r = this.rules.get(key);
    this.firstSecond ??= second;
    if (!r) {
      const timeline = new Timeline(this.firstSecond);
      r = {
        domain,
        rule,
        category,
        requests: 0,
        admitted: 0,
        rejected: 0,
        peakPerSecond: 0,
        peakAdmittedPerSecond: 0,
        second,
        inSecond: 0,
        admittedInSecond: 0,
        timeline,
      };
      this.rules.set(key, r);
    }
    r.timeline.add(second, admitted);
    if (r.second !== second) {
      r.peakPerSecond = Math.max(r.peakPerSecond, r.inSecond);
      r.peakAdmittedPerSecond = Math.max(r.peakAdmittedPerSecond, r.admittedInSecond);
      r.second = second;
      r.inSecond = 0;
      r.admittedInSecond = 0;
    }
    r.requests++;
    r.inSecond++;
    if (admitted) {
      r.admitted++;
      r.admittedInSecond++;
    } else r.rejected++;
  }
}

/** The in_flight rules of a config (domain/rule, at most five named), which a replay cannot hold to requests'
 * durations. */
export function inFlightRules(config: CompiledConfig): string {
  const rules = [...config.domains.values()].flatMap((d) => d.rules.filter((r) => r.inFlight).map((r) => `${d.name}/${r.id}`));
  return rules.length === 0 ? '' : `${rules.slice(0, 5).join(', ')}${rules.length > 5 ? ', …' : ''}`;
}
