import type { RuleSeries, SimulationReport, SpendStats, TokenStats } from './simulate.js';
import type { HeldSeries } from './slot-ledger.js';

/** simulate --report: one self-contained HTML file (inline CSS and SVG, no script, nothing fetched) with,
 * per rule, requests and admitted requests per second over the log's time, and the most limited clients
 * by fingerprint. With --compare, both configs are drawn on the same axes. */

export interface ReportRun {
  /** The config directory, as given on the command line (operator's text). */
  name: string;
  report: SimulationReport;
  series: RuleSeries[];
  /** Slots held over time, per in_flight rule. */
  held?: HeldSeries[];
}

/** Charts drawn at most: a config of thousands of rules would otherwise make a page nobody can read. */
const MAX_CHARTS = 60;

const W = 880;
const H = 220;
const M = { left: 64, right: 16, top: 16, bottom: 44 };
const COLORS = { requests: '#9aa0a6', a: '#1a73e8', b: '#e8710a' };

export function htmlReport(traffic: string, runs: readonly ReportRun[]): string {
  const compare = runs.length > 1;
  const keys = ruleKeys(runs);
  const charts = keys.slice(0, MAX_CHARTS).map((key) => ruleSection(key, runs));
  const more = keys.length > MAX_CHARTS ? `<p class="note">${keys.length - MAX_CHARTS} more rules, with fewer requests, are not drawn.</p>` : '';
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Tollgate simulation: ${esc(traffic)}</title>
<style>${CSS}</style></head><body>
<h1>Tollgate simulation</h1>
<p class="meta">traffic <code>${esc(traffic)}</code> · ${runs.map((r, i) => `${i === 0 ? 'A' : 'B'} = config <code>${esc(r.name)}</code>`).join(' · ')}</p>
${totals(runs)}
${legend(compare)}
${charts.join('\n')}${more}
<h2>Most limited clients</h2>
<div class="tops">${runs.map((r, i) => topTable(r.report.topLimited, runs.length > 1 ? `${i === 0 ? 'A' : 'B'}: ${r.name}` : r.name)).join('')}</div>
${spendSections(runs)}
<p class="note">Clients are named by fingerprint (tollgate fingerprint TOKEN); no token appears in this report.</p>
</body></html>
`;
}

const CSS = `body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#202124;max-width:960px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 6px}.meta,.note{color:#5f6368}
table{border-collapse:collapse;margin:8px 0}td,th{padding:3px 10px;text-align:right;border-bottom:1px solid #e0e0e0}
td:first-child,th:first-child{text-align:left}code{font-size:13px}.tops{display:flex;gap:32px;flex-wrap:wrap}
.legend span{display:inline-block;margin-right:18px}.legend i{display:inline-block;width:18px;height:3px;vertical-align:middle;margin-right:6px}
svg text{font-size:11px;fill:#5f6368}svg .axis-title{font-size:12px;fill:#202124}.bar{fill:#d93025}`;

/** Rules by domain/rule, the busiest first (by the most requests either config saw). */
function ruleKeys(runs: readonly ReportRun[]): string[] {
  const requests = new Map<string, number>();
  for (const r of runs) {
    for (const s of r.series) {
      const k = `${s.domain}/${s.rule}`;
      requests.set(
        k,
        Math.max(
          requests.get(k) ?? 0,
          s.requests.reduce((x, y) => x + y, 0),
        ),
      );
    }
  }
  return [...requests].sort((x, y) => y[1] - x[1] || x[0].localeCompare(y[0])).map(([k]) => k);
}

function totals(runs: readonly ReportRun[]): string {
  const rows = runs.map((r, i) => {
    const t = r.report;
    const cells = [runs.length > 1 ? (i === 0 ? 'A' : 'B') : 'config', n(t.lines), n(t.admitted), n(t.rejected), n(t.notLimited)];
    return `<tr>${cells.map((c) => `<td>${c}</td>`).join('')}</tr>`;
  });
  return `<table><tr><th></th><th>requests</th><th>admitted</th><th>rejected (429)</th><th>not rate limited</th></tr>${rows.join('')}</table>`;
}

function legend(compare: boolean): string {
  const item = (color: string, text: string, dash = false): string => `<span><i style="background:${color}${dash ? ';opacity:.8' : ''}"></i>${text}</span>`;
  const b = compare ? item(COLORS.b, 'admitted under B', true) : '';
  return `<p class="legend">${item(COLORS.requests, 'requests')}${item(COLORS.a, compare ? 'admitted under A' : 'admitted')}${b}</p>`;
}

function ruleSection(key: string, runs: readonly ReportRun[]): string {
  const found = runs.map((r) => r.series.find((s) => `${s.domain}/${s.rule}` === key));
  const any = found.find((s) => s !== undefined)!;
  const lines: Line[] = [];
  const base = found[0] ?? found[1]!;
  lines.push({ values: base.requests, s: base, color: COLORS.requests, cls: 'requests' });
  if (found[0]) lines.push({ values: found[0].admitted, s: found[0], color: COLORS.a, cls: 'admitted-a' });
  if (found[1]) lines.push({ values: found[1].admitted, s: found[1], color: COLORS.b, cls: 'admitted-b', dash: true });
  const title = `${any.rule}${any.category ? ` (${any.category})` : ''}`;
  return `<h2>${esc(title)} <span class="meta">${esc(any.domain)}</span></h2>\n${chart(lines)}`;
}

interface Line {
  values: number[];
  s: { originSecond: number; bucketSeconds: number };
  color: string;
  cls: string;
  dash?: boolean;
  /** A level (slots held), drawn as is; else a count per bucket, drawn per second. */
  level?: boolean;
}

/** Per in_flight rule, the slots held over time (the most in each bucket), both configs on the same axes; then
 * the clients charged most. Nothing when the replay had neither. */
function spendSections(runs: readonly ReportRun[]): string {
  const out: string[] = [];
  const keys = [...new Set(runs.flatMap((r) => (r.held ?? []).map((h) => `${h.domain}/${h.rule}`)))].sort().slice(0, MAX_CHARTS);
  for (const key of keys) {
    const found = runs.map((r) => r.held?.find((h) => `${h.domain}/${h.rule}` === key));
    const lines: Line[] = [];
    found.forEach((h, i) => {
      if (h) lines.push({ values: h.peak, s: h, color: i === 0 ? COLORS.a : COLORS.b, cls: `held-${i === 0 ? 'a' : 'b'}`, dash: i === 1, level: true });
    });
    out.push(`<h2>${esc(key)}: in-flight slots held</h2>\n${chart(lines)}`);
  }
  if (runs.some((r) => r.report.topSpend.length > 0)) {
    const tables = runs.map((r, i) => spendTable(r.report.topSpend, runs.length > 1 ? `${i === 0 ? 'A' : 'B'}: ${r.name}` : r.name));
    out.push(`<h2>Most charged clients</h2>\n<div class="tops">${tables.join('')}</div>`);
  }
  return out.join('\n');
}

function spendTable(tops: readonly SpendStats[], title: string): string {
  if (tops.length === 0) return `<div><h3>${esc(title)}</h3><p class="note">nothing charged</p></div>`;
  const rows = tops.map(
    (t) => `<tr><td><code>${esc(t.fingerprint)}</code></td><td>${n(t.requests)}</td><td>${n(t.rejected)}</td><td>${n(t.charged)}</td></tr>`,
  );
  const head = '<tr><th>fingerprint</th><th>requests</th><th>rejected</th><th>charged</th></tr>';
  return `<div><h3>${esc(title)}</h3><table class="spend">${head}${rows.join('')}</table></div>`;
}

/** One chart: per-second rates of each line over time, with labelled axes. */
function chart(lines: readonly Line[]): string {
  const t0 = Math.min(...lines.map((l) => l.s.originSecond));
  const t1 = Math.max(...lines.map((l) => l.s.originSecond + Math.max(1, l.values.length) * l.s.bucketSeconds), t0 + 1);
  const rate = (l: Line, i: number): number => (l.level ? l.values[i]! : l.values[i]! / l.s.bucketSeconds);
  const yMax = niceMax(Math.max(1, ...lines.flatMap((l) => l.values.map((_, i) => rate(l, i)))));
  const x = (t: number): number => M.left + ((t - t0) / (t1 - t0)) * (W - M.left - M.right);
  const y = (v: number): number => H - M.bottom - (v / yMax) * (H - M.top - M.bottom);
  const paths = lines.map((l) => {
    // A step line: each bucket's rate held across the bucket.
    const d = l.values.map((_, i) => {
      const from = l.s.originSecond + i * l.s.bucketSeconds;
      return `${i === 0 ? 'M' : 'L'}${x(from).toFixed(1)},${y(rate(l, i)).toFixed(1)}H${x(from + l.s.bucketSeconds).toFixed(1)}`;
    });
    return `<path class="series ${l.cls}" d="${d.join('')}" fill="none" stroke="${l.color}" stroke-width="1.6"${l.dash ? ' stroke-dasharray="5 3"' : ''}/>`;
  });
  const bucket = Math.max(...lines.map((l) => l.s.bucketSeconds));
  const perSecond = bucket > 1 ? `requests per second (average over ${bucket} s)` : 'requests per second';
  const yTitle = lines.some((l) => l.level) ? `slots held (the most in each ${bucket} s)` : perSecond;
  return `<svg role="img" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" xmlns="http://www.w3.org/2000/svg">
${axes(t0, t1, yMax, x, y)}
<text class="axis-title" x="${M.left}" y="${M.top - 4}">${yTitle}</text>
<text class="axis-title" x="${W - M.right}" y="${H - 6}" text-anchor="end">time (UTC)</text>
${paths.join('\n')}
</svg>`;
}

function axes(t0: number, t1: number, yMax: number, x: (t: number) => number, y: (v: number) => number): string {
  const parts = [
    `<line x1="${M.left}" y1="${y(0)}" x2="${W - M.right}" y2="${y(0)}" stroke="#5f6368"/>`,
    `<line x1="${M.left}" y1="${M.top}" x2="${M.left}" y2="${y(0)}" stroke="#5f6368"/>`,
  ];
  for (let i = 0; i <= 4; i++) {
    const v = (yMax * i) / 4;
    parts.push(`<line x1="${M.left}" y1="${y(v)}" x2="${W - M.right}" y2="${y(v)}" stroke="#eee"/>`);
    parts.push(`<text class="y-label" x="${M.left - 6}" y="${y(v) + 4}" text-anchor="end">${n(v)}</text>`);
  }
  for (const t of timeTicks(t0, t1)) {
    const anchor = x(t) < M.left + 30 ? 'start' : x(t) > W - M.right - 30 ? 'end' : 'middle';
    parts.push(`<line x1="${x(t)}" y1="${y(0)}" x2="${x(t)}" y2="${y(0) + 4}" stroke="#5f6368"/>`);
    parts.push(`<text class="x-label" x="${x(t)}" y="${H - M.bottom + 16}" text-anchor="${anchor}">${timeLabel(t, t1 - t0)}</text>`);
  }
  return parts.join('\n');
}

/** Steps a reader counts in: 1, 2, 5, 10, 15, 30 s, 1, 2, 5, 10, 15, 30 min, 1, 2, 3, 6, 12 h, days. */
const STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10_800, 21_600, 43_200, 86_400];

/** Round times for the x axis: at most 6, on multiples of a step from STEPS. */
function timeTicks(t0: number, t1: number): number[] {
  const span = t1 - t0;
  const step = STEPS.find((s) => span / s <= 6) ?? Math.ceil(span / 6 / 86_400) * 86_400;
  const ticks: number[] = [];
  for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) ticks.push(t);
  return ticks;
}

function topTable(tops: readonly TokenStats[], title: string): string {
  if (tops.length === 0) return `<div><h3>${esc(title)}</h3><p class="note">no client was limited</p></div>`;
  const max = Math.max(...tops.map((t) => t.rejected));
  const rows = tops.map(
    (t) =>
      `<tr><td><code>${esc(t.fingerprint)}</code></td><td>${n(t.requests)}</td><td>${n(t.rejected)}</td><td><svg width="120" height="10"><rect ` +
      `class="bar" width="${((120 * t.rejected) / max).toFixed(1)}" height="10"/></svg></td></tr>`,
  );
  return `<div><h3>${esc(title)}</h3><table class="top"><tr><th>fingerprint</th><th>requests</th><th>rejected</th><th></th></tr>${rows.join('')}</table></div>`;
}

/** A round upper bound for the y axis: 1, 2, 2.5 or 5 times a power of ten, at least the largest value. */
function niceMax(v: number): number {
  const p = 10 ** Math.floor(Math.log10(v));
  return [1, 2, 2.5, 5, 10].map((m) => m * p).find((c) => c >= v)!;
}

/** HH:MM:SS for spans under two days, else the date and hour. */
function timeLabel(second: number, span: number): string {
  const iso = new Date(Math.round(second) * 1000).toISOString();
  return span < 2 * 86_400 ? iso.slice(11, 19) : `${iso.slice(0, 10)} ${iso.slice(11, 16)}`;
}

function n(v: number): string {
  return Number.isInteger(v) ? v.toLocaleString('en-US') : v.toLocaleString('en-US', { maximumFractionDigits: 1 });
}

/** Config directory names, rule ids and domains are operator text, and still escaped: a report is a page. */
function esc(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}
