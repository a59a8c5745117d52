import { windowText } from '../config/units.js';
import type { Explanation, StepExplanation } from '../limiter/explain.js';
import { ALGORITHMS, KIND_CODES, type LimitKind } from '../limits/kinds/index.js';
import type { RuleStats, SimulationReport } from './simulate.js';

const n = (x: number): string => x.toLocaleString('en-US');

/** Left-aligned first column, right-aligned numbers. */
function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  return rows.map((r) => r.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ')).join('\n');
}

export function formatSimulation(r: SimulationReport): string {
  const lines = [
    `${n(r.lines)} requests: ${n(r.admitted)} admitted, ${n(r.rejected)} rejected (429), ${n(r.notLimited)} on routes without rate limits`,
    '',
    table([
      ['rule', 'category', 'requests', 'admitted', 'rejected', 'peak/s', 'peak admitted/s'],
      ...r.rules.map((x) => [`${x.domain}/${x.rule}`, x.category, n(x.requests), n(x.admitted), n(x.rejected), n(x.peakPerSecond), n(x.peakAdmittedPerSecond)]),
    ]),
  ];
  if (r.topLimited.length > 0) {
    lines.push(
      '',
      'most limited tokens',
      table([['fingerprint', 'requests', 'rejected'], ...r.topLimited.map((t) => [t.fingerprint, n(t.requests), n(t.rejected)])]),
    );
  }
  return `${[...lines, ...spendLines(r)].join('\n')}\n`;
}

/** Costs and in-flight slots, when the replay had any: the clients charged most, and per in_flight rule its
 * slots taken, refused, given back and held at most at once. */
function spendLines(r: SimulationReport): string[] {
  const lines: string[] = [];
  if (r.charged > 0) lines.push('', `${n(r.charged)} charged (tokens, hits); ${n(r.streamEnds)} stream-done calls`);
  else if (r.streamEnds > 0) lines.push('', `${n(r.streamEnds)} stream-done calls`);
  if (r.topSpend.length > 0) {
    lines.push(
      '',
      'most charged clients',
      table([['fingerprint', 'requests', 'rejected', 'charged'], ...r.topSpend.map((t) => [t.fingerprint, n(t.requests), n(t.rejected), n(t.charged)])]),
    );
  }
  if (r.inFlight.length > 0) {
    lines.push(
      '',
      'in-flight slots',
      table([
        ['rule', 'limit', 'taken', 'refused', 'given back', 'peak held'],
        ...r.inFlight.map((x) => [`${x.domain}/${x.rule}`, n(x.limit), n(x.taken), n(x.refused), n(x.returned), n(x.peakHeld)]),
      ]),
    );
  }
  return lines;
}

export interface Comparison {
  rules: { domain: string; rule: string; category: string; requests: number; admitted: [number, number]; rejected: [number, number] }[];
  admitted: [number, number];
  rejected: [number, number];
}

/** The same traffic under two configs, rule by rule. */
export function compare(a: SimulationReport, b: SimulationReport): Comparison {
  const key = (x: RuleStats): string => `${x.domain}/${x.rule}`;
  const byKey = new Map<string, [RuleStats | undefined, RuleStats | undefined]>();
  for (const x of a.rules) byKey.set(key(x), [x, undefined]);
  for (const x of b.rules) byKey.set(key(x), [byKey.get(key(x))?.[0], x]);
  const rules = [...byKey.values()].map(([x, y]) => {
    const any = (x ?? y)!;
    return {
      domain: any.domain,
      rule: any.rule,
      category: any.category,
      requests: any.requests,
      admitted: [x?.admitted ?? 0, y?.admitted ?? 0] as [number, number],
      rejected: [x?.rejected ?? 0, y?.rejected ?? 0] as [number, number],
    };
  });
  rules.sort((p, q) => `${p.domain}/${p.rule}`.localeCompare(`${q.domain}/${q.rule}`));
  return { rules, admitted: [a.admitted, b.admitted], rejected: [a.rejected, b.rejected] };
}

export function formatComparison(c: Comparison, nameA: string, nameB: string): string {
  const delta = (p: [number, number]): string => `${p[1] - p[0] >= 0 ? '+' : ''}${n(p[1] - p[0])}`;
  return `${[
    `A = ${nameA}, B = ${nameB}`,
    `admitted ${n(c.admitted[0])} → ${n(c.admitted[1])} (${delta(c.admitted)}), rejected ${n(c.rejected[0])} → ${n(c.rejected[1])} (${delta(c.rejected)})`,
    '',
    table([
      ['rule', 'requests', 'admitted A', 'admitted B', 'Δ admitted', 'rejected A', 'rejected B', 'Δ rejected'],
      ...c.rules.map((r) => [
        `${r.domain}/${r.rule}`,
        n(r.requests),
        n(r.admitted[0]),
        n(r.admitted[1]),
        delta(r.admitted),
        n(r.rejected[0]),
        n(r.rejected[1]),
        delta(r.rejected),
      ]),
    ]),
  ].join('\n')}\n`;
}

/** What the config has where an entry matched nothing, and the nearest of it to what was typed (the CLI
 * shows the user's own text, JSON-quoted; a key the config knows is written plain). */
function expectedLines(s: StepExplanation): string[] {
  const knownKey = !s.key.startsWith('"') && !s.key.startsWith('fingerprint:');
  const choices = knownKey ? s.expected!.values : s.expected!.keys;
  const typedText = knownKey ? s.value : s.key;
  const what = knownKey ? `values of ${s.key}` : 'keys';
  if (choices.length === 0) return [`    the config has no ${what} here`];
  const shown = choices.slice(0, 12).join(', ') + (choices.length > 12 ? `, … (${choices.length} in all)` : '');
  const out = [`    the config's ${what} here: ${shown}`];
  const typed = typedText.startsWith('"') ? (JSON.parse(typedText) as string) : undefined;
  const near = typed === undefined ? undefined : nearest(typed, choices);
  if (near !== undefined) out.push(`    did you mean ${knownKey ? `${s.key}=${near}` : near}?`);
  return out;
}

/** The choice within two edits of `typed` (case aside), the closest first; none when nothing is that near. */
function nearest(typed: string, choices: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = 3;
  for (const c of choices) {
    const d = editDistance(typed.toLowerCase(), c.toLowerCase(), bestDistance);
    if (d < bestDistance) [best, bestDistance] = [c, d];
  }
  return best;
}

/** Levenshtein distance, or `cap` as soon as it cannot be below it (typed text is short; choices are many). */
function editDistance(a: string, b: string, cap: number): number {
  if (Math.abs(a.length - b.length) >= cap) return cap;
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) row[j] = Math.min(prev[j]! + 1, row[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    if (Math.min(...row) >= cap) return cap;
    prev = row;
  }
  return Math.min(prev[b.length]!, cap);
}

/** How an entry matched, as explain says it. */
function howMatched(s: StepExplanation): string {
  const shared = s.shared ? ', share_threshold: every matching value shares one counter' : ', each value its own counter';
  if (s.matched === 'exact') return 'exact value';
  if (s.matched === 'wildcard') return `wildcard ${s.pattern}${shared}`;
  if (s.matched === 'default') return 'default key (any value, each its own counter)';
  if (s.matched === 'id') return 'the id of the request (or its reservation), kept by its fingerprint: no part of the counter';
  return 'no match';
}

/** What each op does, as explain says it. */
const OP_TEXT: Record<string, string> = {
  check: 'reads the counters, counts nothing',
  count: 'counts its hits if admitted',
  refund: "gives its hits back, as Envoy's is_negative_hits asks; never refused",
  take: 'takes a slot if one is free',
  giveBack: "gives its request's slot back, as Envoy's stream-done call asks; never refused",
};

/** What an in_flight rule does with a request's slot, in one line. */
function inFlightLine(r: { requestKey?: string; leaseMs?: number; maxHoldMs?: number }): string {
  const renewed = r.maxHoldMs === undefined ? '' : `, renewed while its Envoy is connected for up to ${r.maxHoldMs / 1000}s`;
  const id = r.requestKey ? ` (its ${r.requestKey} entry)` : '';
  return `  in_flight: a slot per request${id}, given back at its end, else returned after ${r.leaseMs! / 1000}s${renewed}`;
}

export function formatExplanation(e: Explanation): string {
  const lines = [e.known ? `domain ${e.domain} (${e.file})` : `domain ${e.domain}: not configured, so every request passes`];
  if (e.shadowMode) lines.push('shadow mode (--shadow-mode): every descriptor is reported, none rejected');
  e.descriptors.forEach((d, i) => {
    lines.push(`descriptor ${i}: ${d.steps.map((s) => `${s.key}=${s.value}`).join(', ')}`);
    for (const s of d.steps) {
      lines.push(`  ${s.key}: ${howMatched(s)}${s.source ? `  (${s.source})` : ''}`);
      if (s.matched === 'none' && s.expected) lines.push(...expectedLines(s));
    }
    if (d.rule)
      lines.push(
        `  rule ${d.rule.id} (${d.rule.source}), ${d.rule.algorithm}${d.rule.unlimited ? ', unlimited' : ''}` +
          `${d.rule.shadow ? ', shadow mode: never rejects' : ''}${d.quota ? ', quota mode: rejects only when every quota-mode descriptor is full' : ''}`,
      );
    if (d.rule?.leaseMs !== undefined) lines.push(inFlightLine(d.rule));
    if (d.op) lines.push(`  op: ${d.op}${OP_TEXT[d.op] ? ` (${OP_TEXT[d.op]})` : ''}`);
    if (d.rule?.charge) lines.push('  charge mode: hits_addend 0 checks; any other hits are a charge, counted in full past the limit too');
    if (d.rule?.reservationKey !== undefined) {
      lines.push(
        d.settlement
          ? `  the last entry (${d.rule.settlementKey}) settles a reservation (the stream's end): to its hits; with none to settle, charged in full once`
          : d.reservation
            ? `  the last entry (${d.rule.reservationKey}) names a reservation: reserved if it fits the first time, settled to its hits the next`
            : `  takes reservations by a last entry ${d.rule.reservationKey} (this request names none: a plain charge)`,
      );
    }
    if (d.override) lines.push("  Envoy's per-descriptor limit replaces the config's");
    if (d.reason) lines.push(`  no limits: ${d.reason}`);
    if (d.limits.length === 0) return;
    lines.push(`  tier: ${d.tier ?? '(none)'}`);
    for (const l of d.limits) {
      const live = l.used !== undefined ? `: ${l.used} used, ${l.remaining} left${l.wouldReject ? ', WOULD REJECT the next request' : ''}` : '';
      const kind = ALGORITHMS[KIND_CODES[l.algorithm as LimitKind]]!;
      const bucket = l.burst !== undefined ? ` (${l.algorithm}, burst ${l.burst})` : '';
      const per = kind.slots ? `${kind.per(l)} (${l.algorithm})` : `per ${windowText({ unit: l.unit, windowName: l.window })}`;
      lines.push(`  limit ${l.name}: ${l.requestsPerUnit} ${per}${bucket}${l.replacedBy ? ` (replaced by ${l.replacedBy}: does not apply)` : ''}${live}`);
    }
    if (d.firstToReject)
      lines.push(d.shadow ? `  a burst fills ${d.firstToReject} first (shadow: reported, not rejected)` : `  a burst is stopped first by ${d.firstToReject}`);
  });
  if (e.descriptors.length > 1) {
    lines.push(
      e.firstToReject
        ? `a burst of this request is stopped first by ${e.firstToReject.limit} (descriptor ${e.firstToReject.descriptor})`
        : 'a burst of this request is never stopped',
    );
  }
  return `${lines.join('\n')}\n`;
}
