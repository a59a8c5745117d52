import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import type { CompiledConfig } from '../config/compiled.js';
import { InvalidRequestError } from '../errors.js';
import { asFingerprint, FINGERPRINT_LENGTH, fingerprint } from '../fingerprint.js';
import { readJsonBody, send } from '../http/http-util.js';
import type { RuleCensus } from '../limiter/slot-census.js';
import { httpStatusOf, toStatus } from '../response/error-status.js';
import type { MemoryUsageLedger } from '../store/memory-usage-ledger.js';
import type { SpendTop } from '../store/spend-top.js';
import type { Store } from '../store/store.js';
import { inFlightView } from './in-flight-view.js';
import { inspectToken, tokenWindows } from './inspect.js';
import { spendView } from './spend-view.js';
import type { TierStore } from './tier-store.js';
import { usageView } from './usage-view.js';

export interface AdminDeps {
  /** The bearer token the admin API requires (TOLLGATE_ADMIN_TOKEN). */
  adminToken: string;
  tiers: TierStore;
  config: () => CompiledConfig;
  store: Store;
  logger: Logger;
  /** Called after counters were reset here, so this replica's over-limit cache forgets them too. */
  onLocalReset: (keys: readonly string[]) => void;
  /** The last census of every in_flight rule (limiter/slot-census.ts), when the store keeps one. */
  inFlight?: () => RuleCensus[];
  /** The store's spend lists (store/spend-top.ts), when it keeps them. */
  spend?: SpendTop;
  /** The memory store's usage ledger (store/memory-usage-ledger.ts); Redis's is read from Redis. */
  usage?: MemoryUsageLedger;
}

export type AdminHandler = (req: IncomingMessage, res: ServerResponse, path: string) => Promise<void>;

/** The admin API on its own port: tiers by fingerprint, a client's counters, counter resets. */
export function adminApi(deps: AdminDeps): AdminHandler {
  const expected = createHash('sha256').update(deps.adminToken).digest();
  const who = fingerprint(deps.adminToken);
  return async (req, res, path) => {
    if (!authorized(req, expected)) {
      send(res, 401, { error: 'admin API: send Authorization: Bearer <TOLLGATE_ADMIN_TOKEN>' }, { 'www-authenticate': 'Bearer realm="tollgate-admin"' });
      return;
    }
    try {
      await route(deps, who, req, res, path);
    } catch (err) {
      // The path is the client's text (it may be a token pasted by mistake): only the method is logged.
      const log = deps.logger.child({ method: req.method });
      const s = toStatus(err, log, 'answering an admin request');
      const code = httpStatusOf(s.code);
      if (code === 503) log.warn({ err: s.details }, 'admin request failed: store unavailable');
      send(res, code, { error: s.details });
    }
  };
}

/** Compares digests, so neither the length nor any prefix of the token leaks through timing. */
function authorized(req: IncomingMessage, expected: Buffer): boolean {
  const header = req.headers.authorization ?? '';
  const m = /^Bearer (.+)$/i.exec(header);
  if (!m) return false;
  return timingSafeEqual(createHash('sha256').update(m[1]!).digest(), expected);
}

async function route(deps: AdminDeps, who: string, req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
  const parts = path.split('/').filter(Boolean); // ['admin', 'tiers', fp] …
  const [, resource, id, sub] = parts;
  const method = req.method ?? 'GET';
  if (path === '/v1/spend' && method === 'GET') return send(res, ...(await spendView(deps, req.url ?? '')));
  if (path === '/v1/usage' && method === 'GET') return send(res, ...usageView(deps.usage, req.url ?? ''));
  if (resource === 'tiers' && id === undefined && method === 'GET') {
    return send(res, 200, { assignments: await deps.tiers.list() });
  }
  if (resource === 'tiers' && id !== undefined && sub === undefined) {
    const fp = normalizeFingerprint(id);
    if (method === 'PUT') return assignTier(deps, who, req, res, fp);
    if (method === 'DELETE') {
      const removed = await deps.tiers.remove(fp);
      deps.logger.info({ admin: who, action: 'tier.remove', fingerprint: fp, removed }, 'admin change');
      return send(res, removed ? 200 : 404, removed ? { fingerprint: fp, tier: null } : { error: `no tier assigned to ${fp}` });
    }
  }
  if (resource === 'in-flight' && id === undefined && method === 'GET') return send(res, 200, inFlightView(deps, req.url ?? ''));
  if (resource === 'tokens' && id !== undefined) {
    const fp = normalizeFingerprint(id);
    if (sub === undefined && method === 'GET') {
      const counters = await inspectToken(deps.config(), deps.tiers, deps.store, fp);
      return send(res, 200, { fingerprint: fp, tier: deps.tiers.tierOf(fp) ?? null, counters });
    }
    if (sub === 'counters' && method === 'DELETE') {
      const windows = tokenWindows(deps.config(), deps.tiers, fp);
      const removed = await deps.store.reset(windows);
      const keys = windows.map((w) => w.key);
      deps.onLocalReset(keys);
      // The counters are reset whatever happens next: a failed announcement is reported, not an error. Other
      // replicas then answer from their over-limit cache until those windows end.
      const announced = await deps.tiers.announceReset(keys).then(
        () => true,
        (err: unknown) => {
          deps.logger.warn({ err: (err as Error).message }, 'counter reset not announced to other replicas');
          return false;
        },
      );
      deps.logger.info({ admin: who, action: 'counters.reset', fingerprint: fp, windows: windows.length, removed, announced }, 'admin change');
      return send(res, 200, { fingerprint: fp, reset: windows.length, existed: removed, announced });
    }
  }
  send(res, 404, {
    error: 'unknown admin route',
    routes: [
      'GET /admin/tiers',
      'GET /admin/in-flight?top=N',
      'GET /v1/spend?rule=NAME&top=N&offset=K',
      'GET /v1/usage?after=N&count=M',
      'PUT /admin/tiers/{fingerprint}',
      'DELETE /admin/tiers/{fingerprint}',
      'GET /admin/tokens/{fingerprint}',
      'DELETE /admin/tokens/{fingerprint}/counters',
    ],
  });
}

async function assignTier(deps: AdminDeps, who: string, req: IncomingMessage, res: ServerResponse, fp: string): Promise<void> {
  const body = (await readJsonBody(req, (status, error) => send(res, status, { error }))) as { tier?: unknown } | null | undefined;
  if (body === undefined) return; // refused (415, 413, 400): answered already
  const tier = body?.tier;
  if (typeof tier !== 'string' || tier === '') throw new InvalidRequestError('body must be {"tier": "<tier name>"}');
  const known = [...deps.config().domains.values()].flatMap((d) => [...d.tiers]);
  // The name sent is not repeated: answers carry configured text only (its length says which one was meant).
  if (!known.includes(tier)) throw new InvalidRequestError(`unknown tier (${tier.length} characters): known tiers are ${known.join(', ') || 'none'}`);
  const assignment = { fingerprint: fp, tier, assignedAt: new Date().toISOString(), by: who };
  await deps.tiers.assign(assignment);
  deps.logger.info({ admin: who, action: 'tier.assign', fingerprint: fp, tier }, 'admin change');
  // The rules whose limits the tier changes (config text): none, and the assignment changes nothing yet.
  const rules = [...deps.config().domains.values()].flatMap((d) => d.rules.filter((r) => r.tierLimits.has(tier)).map((r) => `${d.name}/${r.id}`));
  send(res, 200, { ...assignment, rules });
}

/** Fingerprints in keys and tiers are 32 hex characters; the full SHA-256 (64) is accepted too. */
function normalizeFingerprint(text: string): string {
  const fp = asFingerprint(decodeSegment(text));
  if (!fp) throw new InvalidRequestError(`not a fingerprint: expected ${FINGERPRINT_LENGTH} hex characters (tollgate fingerprint TOKEN prints it)`);
  return fp;
}

/** A path segment without its percent-escapes; a malformed escape is the client's mistake (400), not a
 * failure of the service. */
function decodeSegment(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    throw new InvalidRequestError('the path has a malformed percent-escape');
  }
}
