import { SimEnvoy } from './envoy-rlqs.js';

/** Issue 40's fleet scenario, shared by test/integration/rlqs-accuracy.test.ts (reports every second) and
 * `npm run bench:rlqs` (Envoy's 5 s): skewed demand of 3.6 L over 20 instances (one at 1.2 L, one at 0.6, 0.4,
 * 0.3, six at 0.15, ten at 0.02) that shifts after 7 intervals (the six drop to 0.02 L, the ten rise to 0.15),
 * for 13 intervals; with 100 instances, each group five times as many at a fifth of the rate. Every instance is a
 * simulated Envoy (envoy-rlqs.ts) from its own loopback address, spread over the replicas. */

export interface ScenarioOptions {
  ports: number[];
  /** Loopback addresses 127.<net>.x.y: a scenario of its own per net. */
  net: number;
  instances: 20 | 100;
  limit: number;
  intervalMs: number;
  changedBucket: 'share' | 'full';
  /** The bucket (test/fixtures/rlqs): one per scenario, so scenarios share no table. */
  id: Record<string, string>;
}

export interface ScenarioResult {
  /** Admitted per interval, as a share of the limit. */
  windows: number[];
  /** The same, less what instances admitted before their first answer (Envoy's no-assignment behaviour,
   * ALLOW_ALL in envoy-rlqs.yaml): what the assignments let through. */
  assignedWindows: number[];
  /** Intervals in steady state (not the first two, nor the two after the shift). */
  steady: number[];
  /** Of the instances under the water level in each phase, what was admitted of what they offered, in steady
   * intervals. */
  underServed: number;
  /** Token buckets changed, and actions received, per instance. */
  changesPerInstance: number;
  actionsPerInstance: number;
}

const SHIFT_AT = 7;
const INTERVALS = 13;

/** Each instance's demand as a share of the limit, before and after the shift. */
function demands(n: 20 | 100): { before: number[]; after: number[] } {
  const groups = [
    { count: 1, before: 1.2, after: 1.2 },
    { count: 1, before: 0.6, after: 0.6 },
    { count: 1, before: 0.4, after: 0.4 },
    { count: 1, before: 0.3, after: 0.3 },
    { count: 6, before: 0.15, after: 0.02 },
    { count: 10, before: 0.02, after: 0.15 },
  ];
  const k = n / 20;
  const before: number[] = [];
  const after: number[] = [];
  for (const g of groups)
    for (let i = 0; i < g.count * k; i++) {
      before.push(g.before / k);
      after.push(g.after / k);
    }
  return { before, after };
}

/** The water level of demands against a capacity (max-min fair), to know who is under it. */
function level(capacity: number, ds: readonly number[]): number {
  const sorted = [...ds].sort((a, b) => a - b);
  let left = capacity;
  for (let k = 0; k < sorted.length; k++) {
    const equal = left / (sorted.length - k);
    if (sorted[k]! >= equal) return equal;
    left -= sorted[k]!;
  }
  return Infinity;
}

export async function runScenario(o: ScenarioOptions): Promise<ScenarioResult> {
  const { before, after } = demands(o.instances);
  const sims = before.map(
    (_, i) =>
      new SimEnvoy({
        ports: [o.ports[i % o.ports.length]!],
        localAddress: `127.${o.net}.${1 + Math.floor(i / 250)}.${1 + (i % 250)}`,
        domain: 'rlqs-test',
        reportIntervalMs: o.intervalMs,
        changedBucket: o.changedBucket,
      }),
  );
  const { id } = o;
  const admitted = Array.from({ length: INTERVALS }, () => new Array<number>(sims.length).fill(0));
  const offered = Array.from({ length: INTERVALS }, () => new Array<number>(sims.length).fill(0));
  const unanswered = new Array<number>(INTERVALS).fill(0);
  const carry = new Array<number>(sims.length).fill(0);
  const start = Date.now();
  let last = start;
  try {
    for (;;) {
      await new Promise((r) => setTimeout(r, 10));
      const now = Date.now();
      const w = Math.floor((now - start) / o.intervalMs);
      if (w >= INTERVALS) break;
      const rates = w < SHIFT_AT ? before : after;
      sims.forEach((sim, i) => {
        carry[i]! += (rates[i]! * o.limit * (now - last)) / 1000;
        while (carry[i]! >= 1) {
          carry[i]! -= 1;
          offered[w]![i]!++;
          const answered = sim.actions > 0; // each instance holds one bucket
          if (!sim.request(id, now)) continue;
          admitted[w]![i]!++;
          if (!answered) unanswered[w]!++;
        }
      });
      last = now;
    }
  } finally {
    for (const s of sims) s.close();
  }
  return summarize(o, sims, { admitted, offered, unanswered }, { before, after });
}

interface Counts {
  /** Per interval, per instance. */
  admitted: number[][];
  offered: number[][];
  /** Per interval: admitted by instances not yet answered. */
  unanswered: number[];
}

function summarize(o: ScenarioOptions, sims: SimEnvoy[], c: Counts, d: { before: number[]; after: number[] }): ScenarioResult {
  const { admitted, offered } = c;
  const perSecond = 1000 / o.intervalMs;
  const windows = admitted.map((row) => (row.reduce((a, b) => a + b, 0) * perSecond) / o.limit);
  const assignedWindows = windows.map((x, w) => x - (c.unanswered[w]! * perSecond) / o.limit);
  const steadyIdx = windows.map((_, w) => w).filter((w) => (w >= 2 && w < SHIFT_AT) || w >= SHIFT_AT + 2);
  let got = 0;
  let asked = 0;
  for (const w of steadyIdx) {
    const rates = w < SHIFT_AT ? d.before : d.after;
    const lvl = level(1, rates);
    rates.forEach((r, i) => {
      if (r >= lvl) return;
      got += admitted[w]![i]!;
      asked += offered[w]![i]!;
    });
  }
  const changes = sims.reduce((a, s) => a + s.changes, 0);
  const actions = sims.reduce((a, s) => a + s.actions, 0);
  return {
    windows,
    assignedWindows,
    steady: steadyIdx.map((w) => windows[w]!),
    underServed: asked === 0 ? 1 : got / asked,
    changesPerInstance: changes / sims.length,
    actionsPerInstance: actions / sims.length,
  };
}
