import { isMap, LineCounter, type Node, parse, parseDocument, stringify } from 'yaml';
import { SLOT_KIND } from '../limits/kinds/index.js';
import { ConfigError, type ConfigProblem } from './errors.js';
import type { ConfigSource } from './load.js';
import { DESCRIPTOR_KEYS, DOMAIN_KEYS } from './validate.js';
import { Reader } from './yaml-reader.js';

/** Tollgate's own keys on rules an xDS server generates (XDS_OVERLAY_FILE): rls_conf.proto has
 * envoyproxy/ratelimit's fields only, so charge mode, reservations, calendar windows, tiers and in-flight slots
 * cannot come from Envoy Gateway. An overlay entry names a generated descriptor by its domain and its path
 * (each level's key, and its value where the generated descriptor has one) and the keys to set on it; the
 * result is validated as any config is (validate.ts), so an overlay can only write what a file could.
 *
 *   overlays:
 *     - domain: default/gateway-1/http
 *       descriptors: [{key: httproute/default/llm/rule/0/match/0, value: httproute/default/llm/rule/0/match/0}, {key: rule-0-match-0}]
 *       set: {charge_mode: true, reservation_key: request_id, settlement_key: settle_id}
 *     - domain: default/gateway-1/http
 *       set: {tiers: [gold]}          # no descriptors: the domain's own keys
 */

/** What an overlay may set on a descriptor: everything but what names and nests it. */
export const OVERLAY_DESCRIPTOR_KEYS = DESCRIPTOR_KEYS.filter((k) => !['key', 'value', 'descriptors'].includes(k));
/** And on a domain. */
export const OVERLAY_DOMAIN_KEYS = DOMAIN_KEYS.filter((k) => !['domain', 'descriptors'].includes(k));
/** Maps merged key by key into what the server generated (a `rate_limit: {calendar: true}` keeps its unit and
 * requests); any other key is replaced. */
const MERGED = new Set(['rate_limit', SLOT_KIND.kind]);
/** Most entries one overlay holds, and levels one path has (as xDS configs nest at most, rls-conf.ts). */
export const MAX_OVERLAY_ENTRIES = 10_000;
const MAX_PATH = 64;

export interface OverlayEntry {
  /** `file:line`, for notes and check-config. */
  at: string;
  domain: string;
  /** Empty: the domain itself. */
  path: { key: string; value: string }[];
  set: Record<string, unknown>;
}

export interface Overlay {
  file: string;
  entries: OverlayEntry[];
}

/** Parses and checks an overlay file's text: every problem at once, with its line, as a config file's. */
export function parseOverlay(file: string, text: string): Overlay {
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, uniqueKeys: true });
  const r = new Reader(file, lines);
  const problems: ConfigProblem[] = doc.errors.map((err) => {
    const pos = err.linePos?.[0] ?? { line: 1, col: 1 };
    return { file, line: pos.line, column: pos.col, key: '', message: err.message.split('\n')[0] ?? err.code };
  });
  if (problems.length > 0) throw new ConfigError(problems);
  const top = r.fields(doc.contents as Node, '', ['overlays']);
  const items = r.list(top?.get('overlays'), 'overlays');
  if (items.length > MAX_OVERLAY_ENTRIES) r.fail(top?.get('overlays'), 'overlays', `${items.length} entries, more than ${MAX_OVERLAY_ENTRIES}`);
  const plain = plainOf(doc, file);
  const entries = items.slice(0, MAX_OVERLAY_ENTRIES).flatMap((item, i) => readEntry(r, item, `overlays[${i}]`, plain?.overlays?.[i]?.set) ?? []);
  if (r.problems.length > 0) throw new ConfigError(r.problems);
  return { file, entries };
}

/** The document as plain data, its aliases bounded as a config file's are (an alias bomb is an error, not memory). */
function plainOf(doc: ReturnType<typeof parseDocument>, file: string): { overlays?: { set?: Record<string, unknown> }[] } | undefined {
  try {
    return doc.toJS({ maxAliasCount: 100 });
  } catch (err) {
    throw new ConfigError([{ file, line: 0, column: 0, key: '', message: (err as Error).message.split('\n')[0] ?? 'cannot be read' }]);
  }
}

function readEntry(r: Reader, item: Node, at: string, plainSet: Record<string, unknown> | undefined): OverlayEntry | undefined {
  const f = r.fields(item, at, ['domain', 'descriptors', 'set']);
  if (!f) return undefined;
  const domain = r.string(f.get('domain'), `${at}.domain`, { nonEmpty: true });
  if (domain === undefined) r.fail(item, `${at}.domain`, 'is required');
  const levels = r.list(f.get('descriptors'), `${at}.descriptors`);
  if (levels.length > MAX_PATH) r.fail(f.get('descriptors'), `${at}.descriptors`, `more than ${MAX_PATH} levels`);
  const path = levels.slice(0, MAX_PATH).map((level, j) => {
    const g = r.fields(level, `${at}.descriptors[${j}]`, ['key', 'value']);
    const key = r.string(g?.get('key'), `${at}.descriptors[${j}].key`, { nonEmpty: true });
    if (g && key === undefined) r.fail(level, `${at}.descriptors[${j}].key`, 'is required');
    return { key: key ?? '', value: r.string(g?.get('value'), `${at}.descriptors[${j}].value`, { numbers: true }) ?? '' };
  });
  const setNode = f.get('set');
  if (!isMap(setNode)) {
    r.fail(setNode ?? item, `${at}.set`, 'is required: a mapping of the keys to set');
    return undefined;
  }
  r.fields(setNode, `${at}.set`, path.length > 0 ? OVERLAY_DESCRIPTOR_KEYS : OVERLAY_DOMAIN_KEYS);
  return domain === undefined || !plainSet ? undefined : { at: `${r.file}:${r.line(item)}`, domain, path, set: plainSet };
}

/** A generated config as envoyproxy/ratelimit's YAML structure (rls-conf.ts yamlDescriptor). */
export interface ConfigDoc {
  domain: string;
  descriptors: Record<string, unknown>[];
  [key: string]: unknown;
}

/** Writes every entry for this domain into the document; returns the entries whose path it does not have. */
export function applyOverlay(doc: ConfigDoc, overlay: Overlay): OverlayEntry[] {
  const missed: OverlayEntry[] = [];
  for (const entry of overlay.entries) {
    if (entry.domain !== doc.domain) continue;
    const target = entry.path.length === 0 ? doc : find(doc.descriptors, entry.path);
    if (!target) {
      missed.push(entry);
      continue;
    }
    for (const [k, v] of Object.entries(entry.set)) write(target, k, v);
  }
  return missed;
}

function find(list: Record<string, unknown>[], path: OverlayEntry['path']): Record<string, unknown> | undefined {
  let level = list;
  let found: Record<string, unknown> | undefined;
  // A dump check-config reads may hold anything where descriptors go: what is not a list of mappings matches nothing.
  for (const { key, value } of path) {
    found = Array.isArray(level) ? level.find((d) => isPlain(d) && d.key === key && (d.value ?? '') === value) : undefined;
    if (!found) return undefined;
    level = (found.descriptors as Record<string, unknown>[] | undefined) ?? [];
  }
  return found;
}

function write(target: Record<string, unknown>, key: string, value: unknown): void {
  const old = target[key];
  if (MERGED.has(key) && isPlain(old) && isPlain(value)) target[key] = { ...old, ...value };
  else target[key] = structuredClone(value);
  // Several windows replace the one the server generated (a descriptor has one or the other).
  if (key === 'rate_limits') delete target.rate_limit;
}

const isPlain = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** check-config's view: the overlay written into config files that stand for what a server generates (one
 * domain per file, envoyproxy/ratelimit's format); the entries no file took, by where they are written. */
export function overlaySources(sources: readonly ConfigSource[], overlay: Overlay): { sources: ConfigSource[]; unmatched: string[] } {
  const missed = new Set<OverlayEntry>();
  const domains = new Set<string>();
  const out = sources.map((src) => {
    let doc: ConfigDoc | null;
    try {
      doc = parse(src.text, { uniqueKeys: true }) as ConfigDoc | null;
    } catch {
      return src; // validation reports what is wrong with it, by line
    }
    if (!doc || typeof doc !== 'object' || typeof doc.domain !== 'string') return src; // validation says why
    domains.add(doc.domain);
    doc.descriptors ??= [];
    for (const e of applyOverlay(doc, overlay)) missed.add(e);
    return { file: src.file, text: stringify(doc, { lineWidth: 0 }) };
  });
  const unmatched = overlay.entries.flatMap((e) =>
    missed.has(e) ? [missedNote(e)] : domains.has(e.domain) ? [] : [`${e.at}: overlay entry: no config has its domain; nothing set`],
  );
  return { sources: out, unmatched };
}

/** Entries named in notes and by check-config: where each is written, never the domain's text. */
export function missedNote(e: OverlayEntry): string {
  return `${e.at}: overlay entry: the domain has no descriptor at this path; nothing set`;
}
