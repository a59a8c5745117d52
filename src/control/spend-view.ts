import type { CompiledConfig, CompiledLimit, Rule } from '../config/compiled.js';
import { InvalidRequestError } from '../errors.js';
import { MAX_SPEND_LISTED, type SpendTop, type SpendWindow, spendWindowOf } from '../store/spend-top.js';

/** Counters shown per window unless `top` says. */
const DEFAULT_TOP = 10;
/** Windows one answer shows, at most (a rule's, and its tiers' that differ). */
const MAX_WINDOWS = 50;
/** A rule or limit name longer than this is no name a config holds. */
const MAX_NAME = 256;

interface Query {
  name: string;
  domain: string | undefined;
  top: number;
  offset: number;
}

/** `GET /v1/spend?rule=NAME[&domain=D][&top=N][&offset=K]` on the admin port: per window of a charge_mode rule
 * (NAME: its descriptor path, or one of its limits' names; its tiers' windows too), the counters that have used
 * the largest share of their own limit, as the store lists them with each charge (store/spend-top.ts), fullest
 * first, a page of `top` from `offset`. Counters by their tag (fingerprints); the name asked for is never
 * repeated back. Answers 404 when no charge_mode rule has that name. */
export async function spendView(deps: { config: () => CompiledConfig; spend?: SpendTop }, url: string): Promise<[number, Record<string, unknown>]> {
  const q = queryOf(new URL(url, 'http://admin').searchParams);
  const found = windowsNamed(deps.config(), q);
  if (found.length === 0) {
    return [404, { error: `no charge_mode rule or limit has that name (${q.name.length} characters)${q.domain === undefined ? '' : ' in that domain'}` }];
  }
  if (!deps.spend) return [503, { error: 'this store keeps no spend lists' }];
  const windows = [];
  for (const { rule, limit, names, w } of found.slice(0, MAX_WINDOWS)) {
    const page = await deps.spend.read(w, q.offset, q.top);
    const next = q.offset + page.counters.length;
    windows.push({
      domain: rule.domain,
      rule: rule.id,
      window: limit.windowName,
      names,
      limit: limit.requestsPerUnit,
      listed: page.listed,
      offset: q.offset,
      counters: page.counters,
      next: next < Math.min(page.listed, MAX_SPEND_LISTED) ? next : null,
    });
  }
  return [200, { windows, more: found.length > MAX_WINDOWS }];
}

function queryOf(p: URLSearchParams): Query {
  const name = p.get('rule');
  if (!name) throw new InvalidRequestError('rule is required: a charge_mode rule (its descriptor path) or one of its limits, by name');
  if (name.length > MAX_NAME) throw new InvalidRequestError(`rule is at most ${MAX_NAME} characters`);
  const domain = p.get('domain') ?? undefined;
  if (domain !== undefined && domain.length > MAX_NAME) throw new InvalidRequestError(`domain is at most ${MAX_NAME} characters`);
  return {
    name,
    domain,
    top: whole(p.get('top'), 'top', 1, MAX_SPEND_LISTED, DEFAULT_TOP),
    offset: whole(p.get('offset'), 'offset', 0, MAX_SPEND_LISTED - 1, 0),
  };
}

function whole(text: string | null, what: string, min: number, max: number, fallback: number): number {
  if (text === null) return fallback;
  const n = Number(text);
  if (text.trim() === '' || !Number.isInteger(n) || n < min || n > max) throw new InvalidRequestError(`${what} must be a whole number from ${min} to ${max}`);
  return n;
}

/** The windows the name picks: every window of a rule by its path (its tiers' that differ too), or the windows
 * of the limits that carry the name; once each, by window name. */
function windowsNamed(config: CompiledConfig, q: Query): { rule: Rule; limit: CompiledLimit; names: string[]; w: SpendWindow }[] {
  const out: { rule: Rule; limit: CompiledLimit; names: string[]; w: SpendWindow }[] = [];
  for (const [domain, d] of config.domains) {
    if (q.domain !== undefined && q.domain !== domain) continue;
    for (const rule of d.rules) {
      if (!rule.charge) continue;
      const limits = [...rule.limits, ...[...rule.tierLimits.values()].flat()];
      const picked = rule.id === q.name ? limits : limits.filter((l) => l.name === q.name);
      const byWindow = new Map<string, CompiledLimit[]>();
      for (const l of picked) byWindow.set(l.windowName, [...(byWindow.get(l.windowName) ?? []), l]);
      for (const ls of byWindow.values()) {
        const l = ls[0]!;
        out.push({ rule, limit: l, names: ls.map((x) => x.name), w: spendWindowOf(rule.counterId, l) });
      }
    }
  }
  return out;
}
