import type { CompiledConfig } from '../config/compiled.js';
import type { TierAssignment } from '../control/tier-store.js';
import { ManualClock } from '../counters/clock.js';
import { type EnvoyCallSetup, type EnvoyCalls, type EnvoyDescriptor, type EnvoyRateLimitSetup, envoyCalls } from '../envoy/routes.js';
import { UserError } from '../errors.js';
import { cachedFingerprint } from '../fingerprint.js';
import { type Decision, type DescriptorInput, Limiter } from '../limiter/limiter.js';
import type { TierSource } from '../limiter/plan.js';
import type { PeerConn, SlotKeeper } from '../limiter/slot-keeper.js';
import { MemoryStore } from '../store/memory-store.js';
import type { HeldSlot } from '../store/store.js';
import { type HeldSeries, type InFlightStats, SlotLedger } from './slot-ledger.js';
import { type Stream, StreamEnds } from './stream-ends.js';
import { type Series, Timeline } from './timeline.js';
import type { TrafficLine } from './traffic.js';

/** Replays traffic through the service's own matching and limiter code, on a virtual clock that follows the
 * log's timestamps, with the memory store (one replica's exact view). A request makes Envoy's two calls: the
 * request phase at its time, the stream-done call (apply_on_stream_done) at its time + its duration; pending
 * ends run in time order before each later line, and the rest at finish(). */

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

/** What a client (by fingerprint) was charged: charge-mode hits (tokens) its calls counted. */
export interface SpendStats extends TokenStats {
  charged: number;
}

export interface SimulationReport {
  lines: number;
  /** Requests no route sends to the rate-limit service. */
  notLimited: number;
  admitted: number;
  rejected: number;
  rules: RuleStats[];
  topLimited: TokenStats[];
  /** Stream-done calls replayed (Envoy ignores their answers: they are not requests). */
  streamEnds: number;
  /** Charge-mode hits counted, over every call (a call's charge: the most any of its descriptors counted, so a
   * stream settled on its month and its hour is counted once). */
  charged: number;
  /** The clients charged most, by fingerprint. */
  topSpend: SpendStats[];
  inFlight: InFlightStats[];
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

/** A line an in_flight config cannot replay: exit 2, as for a config the command cannot take. */
export class ReplayError extends UserError {
  override readonly name = 'ReplayError';
  override readonly exitCode = 2;
}

const NO_RULE = '(none)';
const PEER: PeerConn = { id: 'simulate', base: 'simulate' };

export class Simulation {
  private readonly clock = new ManualClock(0);
  private readonly limiter: Limiter;
  private readonly rules = new Map<string, RuleCounter>();
  private readonly tokens = new Map<string, SpendStats>();
  /** Fingerprint of a stand-in value → the fingerprint the log gave (for logs without tokens). */
  private readonly standIns = new Map<string, string>();
  private readonly slots = new SlotLedger(() => this.firstSecond!);
  private readonly ends: StreamEnds;
  /** The in_flight rules, named: a config with any needs every line's duration. */
  private readonly inFlight: string;
  /** The connection calls name while a rule has max_hold (as the server names one), so taken slots are renewed. */
  private readonly peer: { peer?: PeerConn };
  private readonly tokenKey: string | undefined;
  /** Slots with max_hold the decision running now took (the limiter tells its keeper). */
  private heldNow: HeldSlot[] | undefined;
  private lines = 0;
  /** The log's first second: where every rule's timeline starts, so their charts share an axis. */
  private firstSecond: number | undefined;
  private notLimited = 0;
  private admitted = 0;
  private rejected = 0;
  private streamEnds = 0;
  private charged = 0;

  constructor(
    config: CompiledConfig,
    private readonly envoy: EnvoyRateLimitSetup | EnvoyCallSetup,
    assignments: readonly TierAssignment[] = [],
  ) {
    const byFingerprint = new Map(assignments.map((a) => [a.fingerprint, a.tier]));
    const tiers: TierSource = { tierOf: (fp) => byFingerprint.get(this.standIns.get(fp) ?? fp) };
    const store = new MemoryStore({ clock: this.clock, maxCounters: 10_000_000 });
    // The limiter names what it took to its keeper; the replay renews those slots itself, on its own clock.
    const held = (_peer: PeerConn, slots: HeldSlot[]): void => {
      this.heldNow = slots;
    };
    const keeper = { held } as unknown as SlotKeeper;
    this.limiter = new Limiter({ config: () => config, store, tiers, clock: this.clock, keeper });
    this.inFlight = inFlightRules(config, envoy.domain);
    const leases = [...config.domains.values()].flatMap((d) => d.rules.flatMap((r) => (r.inFlight?.maxHoldMs ? [r.inFlight.leaseMs] : [])));
    // The keeper's period (limiter/slot-keeper.ts): a third of the shortest lease it renews.
    const renewMs = leases.length === 0 ? undefined : Math.max(250, Math.floor(Math.min(...leases) / 3));
    this.peer = renewMs === undefined ? {} : { peer: PEER };
    this.tokenKey = config.domains.get(envoy.domain)?.tokenKey;
    const decide = async (descriptors: DescriptorInput[]): Promise<Decision> => {
      const d = await this.limiter.decide({ domain: this.envoy.domain, descriptors, hits: 1, ...this.peer });
      this.heldNow = undefined;
      return d;
    };
    this.ends = new StreamEnds({ clock: this.clock, store, slots: this.slots, renewMs, decide, ended: (stream, d) => this.streamEnded(stream, d) });
  }

  async feed(line: TrafficLine): Promise<void> {
    this.lines++;
    if (this.inFlight !== '' && line.durationMs === undefined) {
      throw new ReplayError(
        `simulate cannot replay in_flight rules (${this.inFlight}) without each request's duration: line ${line.n ?? this.lines} has none ` +
          '(a column duration_ms, duration or latency_ms, in whole milliseconds: a slot is held from the request to its end)',
      );
    }
    // Logs are written as requests finish, so times can step back a little: the clock never does. What ended by
    // the time the request is decided at runs first.
    await this.ends.runUntil(Math.max(line.timeMs, this.clock.now()));
    if (line.timeMs > this.clock.now()) this.clock.set(line.timeMs);
    this.firstSecond ??= Math.floor(this.clock.now() / 1000);
    const { token, fingerprint } = this.tokenOf(line);
    // Envoy makes an x-request-id for a request that has none: each line its own.
    const headers = { 'x-request-id': `simulate-${this.lines}`, ...line.headers, authorization: token };
    const calls = envoyCalls(this.envoy, { method: line.method, path: line.path, headers });
    if (!calls || calls.request.length === 0) this.notLimited++;
    if (!calls) return;
    const client = this.clientOf(calls.request, fingerprint);
    const now = this.clock.now();
    const d = calls.request.length === 0 ? undefined : await this.requestPhase(calls, line, client);
    const answered = d === undefined || !d.overLimit;
    const done = calls.streamDone({ cost: line.cost, answered });
    const slots = d ? this.slots.taken(d, now) : [];
    const held = this.heldNow;
    this.heldNow = undefined;
    // Most requests of most logs have no stream end and hold nothing: nothing to keep.
    if (done.length === 0 && slots.length === 0 && !held) return;
    const stream: Stream = { done: done.map((x) => inputOf(x, undefined)), client, slots, held, renewing: false };
    // A refused request ends at once (Envoy's 429); an admitted one when its response is done.
    this.ends.schedule(stream, answered ? now + (line.durationMs ?? 0) : now, now);
  }

  /** Runs every pending stream end (the log is over). */
  async finish(): Promise<void> {
    await this.ends.runUntil(Number.POSITIVE_INFINITY);
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
    const clients = [...this.tokens.values()];
    const topLimited = clients
      .filter((t) => t.rejected > 0)
      .sort((a, b) => b.rejected - a.rejected)
      .slice(0, top)
      .map(({ fingerprint, requests, rejected }) => ({ fingerprint, requests, rejected }));
    const topSpend = clients
      .filter((t) => t.charged > 0)
      .sort((a, b) => b.charged - a.charged || a.fingerprint.localeCompare(b.fingerprint))
      .slice(0, top)
      .map((t) => ({ ...t }));
    const { lines, notLimited, admitted, rejected, streamEnds, charged } = this;
    return { lines, notLimited, admitted, rejected, rules, topLimited, streamEnds, charged, topSpend, inFlight: this.slots.stats() };
  }

  /** Every rule's timeline, in the report's rule order. */
  series(): RuleSeries[] {
    return [...this.rules.values()]
      .sort((a, b) => a.domain.localeCompare(b.domain) || a.rule.localeCompare(b.rule))
      .map((r) => ({ domain: r.domain, rule: r.rule, category: r.category, ...r.timeline.series() }));
  }

  /** Slots held over time, per in_flight rule. */
  heldSeries(): HeldSeries[] {
    return this.slots.series();
  }

  /** The request-phase call, counted per rule and client. A logged cost is the request's hits_addend here unless
   * the route reads its hits from the response (then it is charged at the stream's end). */
  private async requestPhase(calls: EnvoyCalls, line: TrafficLine, client: string | undefined): Promise<Decision> {
    const cost = calls.costFromResponse ? undefined : line.cost;
    // A line's cost (hits_addend) is charged as Envoy would send it: 0 checks only.
    const d = await this.limiter.decide({
      domain: this.envoy.domain,
      descriptors: calls.request.map((x) => inputOf(x, cost)),
      hits: Math.max(cost ?? 1, 1),
      ...this.peer,
    });
    if (d.overLimit) this.rejected++;
    else this.admitted++;
    const second = Math.floor(this.clock.now() / 1000);
    for (const o of d.descriptors) this.count(o.rule?.domain ?? this.envoy.domain, o.rule?.id ?? NO_RULE, o.rule?.category ?? '', !d.overLimit, second);
    const t = this.client(client);
    if (t) {
      t.requests++;
      if (d.overLimit) t.rejected++;
    }
    this.spend(d, t);
    return d;
  }

  private streamEnded(stream: Stream, d: Decision): void {
    this.streamEnds++;
    this.spend(d, this.client(stream.client));
  }

  /** A call's charge: the most any of its descriptors counted (its month and its hour count the same tokens). */
  private spend(d: Decision, t: SpendStats | undefined): void {
    let charged = 0;
    for (const o of d.descriptors) charged = Math.max(charged, o.charged ?? 0);
    this.charged += charged;
    if (t) t.charged += charged;
  }

  private client(fingerprint: string | undefined): SpendStats | undefined {
    if (fingerprint === undefined) return undefined;
    let t = this.tokens.get(fingerprint);
    if (!t) {
      t = { fingerprint, requests: 0, rejected: 0, charged: 0 };
      this.tokens.set(fingerprint, t);
    }
    return t;
  }

  /** Who a request is, by fingerprint: its domain's token_key entry (tiers are assigned by it; the LLM example's
   * tenant), else the log's token. */
  private clientOf(descriptors: readonly EnvoyDescriptor[], fallback: string | undefined): string | undefined {
    for (const d of descriptors) {
      const e = d.entries.find((x) => x.key === this.tokenKey);
      if (e) {
        const fp = cachedFingerprint(e.value);
        return this.standIns.get(fp) ?? fp;
      }
    }
    return fallback;
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

/** A descriptor as the limiter takes it: Envoy's own hits_addend, else the logged cost when it is the request's
 * (a cost of 1 is the default, sent as none), and is_negative_hits as a refund. */
function inputOf(x: EnvoyDescriptor, cost: number | undefined): DescriptorInput {
  const hits = x.hits ?? (cost === undefined || cost === 1 ? undefined : cost);
  const input: DescriptorInput = hits === undefined ? { entries: x.entries } : { entries: x.entries, hits };
  if (x.negative) input.refund = true;
  return input;
}

/** The in_flight rules of a config (domain/rule, at most five named), of one domain when given (the one Envoy
 * asks): a replay holds their slots for each request's duration, so it needs one per line. */
export function inFlightRules(config: CompiledConfig, domain?: string): string {
  const domains = [...config.domains.values()].filter((d) => domain === undefined || d.name === domain);
  const rules = domains.flatMap((d) => d.rules.filter((r) => r.inFlight).map((r) => `${d.name}/${r.id}`));
  return rules.length === 0 ? '' : `${rules.slice(0, 5).join(', ')}${rules.length > 5 ? ', …' : ''}`;
}
