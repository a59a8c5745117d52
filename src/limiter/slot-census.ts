import type { CompiledConfig, Rule } from '../config/compiled.js';
import { fingerprint } from '../fingerprint.js';
import type { Census, SlotCensus } from '../store/store.js';

/** What is held, seen (docs/in-flight.md "What is held"): every CENSUS_MS, each in_flight rule's counters are
 * counted where they are (SlotCensus): leases that ran out end then, not when the counter is next used, and the
 * slots held per rule and the counters nearest their limit are read from the store, not derived from event
 * counters. Every replica runs its own census (their answers agree: the store decides); an ended lease is
 * counted by whichever call or census ends it, once. */
export const CENSUS_MS = 10_000;
/** Counters a census keeps per rule, nearest their limit first: what the admin API can list. */
export const CENSUS_TOP = 100;
/** How long a rule's list of counters outlives its last take past the rule's longest hold. */
const KEEP_MARGIN_MS = 60_000;
/** Counters this replica remembers having listed since its last census, at most: a counter is listed once
 * per census here, not at every take (a flood of takes on one counter writes one list entry). */
const NOTED_MAX = 50_000;

/** One rule's last census, and when it ran. */
export interface RuleCensus {
  domain: string;
  rule: Rule;
  atMs: number;
  census: Census;
}

export interface CensusEvents {
  counted(c: RuleCensus): void;
  failed(err: unknown): void;
}

export class SlotCensusRunner {
  /** The last census of each rule, by rule (a reload makes new rules: their census starts afresh). */
  private latest = new Map<Rule, RuleCensus>();
  private timer: NodeJS.Timeout | undefined;
  private running = false;
  /** Counters listed since this replica's last census (cleared by each census, which may drop them). */
  private noted = new Set<string>();

  constructor(
    private readonly census: SlotCensus,
    private readonly config: () => CompiledConfig,
    private readonly events: CensusEvents,
    private readonly now: () => number = Date.now,
  ) {}

  /** A take of `rule`'s slots on counter `key` (its limit then): listed for the census. */
  taken(domain: string, rule: Rule, key: string, limit: number): void {
    const list = listOf(domain, rule);
    const seen = `${list}\n${key}\n${limit}`;
    if (this.noted.has(seen)) return;
    if (this.noted.size >= NOTED_MAX) this.noted.clear();
    this.noted.add(seen);
    const f = rule.inFlight!;
    const keepMs = Math.max(f.leaseMs, f.maxHoldMs ?? 0) + KEEP_MARGIN_MS;
    this.census.note(list, key, limit, keepMs).catch((err: unknown) => this.events.failed(err));
  }

  start(): void {
    this.timer ??= setInterval(() => void this.run(), CENSUS_MS).unref();
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /** One census of every in_flight rule of the config in force (one at a time). */
  async run(): Promise<void> {
    if (this.running) return;
    this.running = true;
    this.noted = new Set();
    try {
      const next = new Map<Rule, RuleCensus>();
      for (const [name, d] of this.config().domains) {
        for (const rule of d.rules) {
          if (!rule.inFlight) continue;
          try {
            const c: RuleCensus = { domain: name, rule, atMs: this.now(), census: await this.census.count(listOf(name, rule), CENSUS_TOP) };
            next.set(rule, c);
            this.events.counted(c);
          } catch (err) {
            this.events.failed(err);
            const last = this.latest.get(rule);
            if (last) next.set(rule, last);
          }
        }
      }
      this.latest = next;
      this.census.retain?.([...next.values()].map((c) => listOf(c.domain, c.rule)));
    } finally {
      this.running = false;
    }
  }

  /** The last census of every in_flight rule that had one. */
  all(): RuleCensus[] {
    return [...this.latest.values()];
  }
}

const lists = new WeakMap<Rule, string>();

/** A rule's list in the store: by fingerprint, so no config text reaches a key (worked out once a rule). */
function listOf(domain: string, rule: Rule): string {
  let list = lists.get(rule);
  if (list === undefined) {
    list = fingerprint(`census ${domain} ${rule.id}`);
    lists.set(rule, list);
  }
  return list;
}
