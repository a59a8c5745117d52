/** What the RLQS stream may answer, judged against the fuzz config (RLQS_FUZZ_YAML) and docs/rlqs.md: an action
 * only for a bucket this stream reported and did not fail the bounds, a TTL of at least a second, and a strategy
 * the bucket's rule allows: no token bucket faster than the rule's rate, never DENY_ALL where no rule limits
 * (unmatched, shadow, unknown domain: RLQS_UNMATCHED=allow), never a token bucket there either. */
import { idKey } from './rlqs-wire.js';

export const RLQS_DOMAIN = 'rlqs-fuzz';

/** The fuzz domain: a per-second rule shared by every instance (the one whose grants are summed), an hourly
 * quota, a shadow rule, a wildcard on one counter, and the RLS probe's and known check's hourly rules. */
export const RLQS_FUZZ_YAML = `
domain: ${RLQS_DOMAIN}
descriptors:
  - key: tenant
    rate_limits:
      - {unit: second, requests_per_unit: 100, name: tenant-per-second}
  - key: hourly
    rate_limits:
      - {unit: second, requests_per_unit: 1000, name: hourly-per-second}
      - {unit: hour, requests_per_unit: 60, name: hourly-per-hour}
  - key: watched
    shadow_mode: true
    rate_limits:
      - {unit: second, requests_per_unit: 1, name: watched-per-second}
  - key: path
    value: files/*
    share_threshold: true
    rate_limits:
      - {unit: second, requests_per_unit: 100, name: files-shared}
  - key: check
    rate_limits:
      - {unit: hour, requests_per_unit: 5, name: check-per-hour}
  - key: probe
    rate_limits:
      - {unit: hour, requests_per_unit: 1000, name: probe-per-hour}
`;

/** The per-second limit of {tenant: *}: what the grants in force of one such bucket may sum to. */
export const TENANT_RATE = 100;

type Id = Record<string, string | Buffer | Uint8Array>;

/** 'allow' where only ALLOW_ALL is right; else the fastest token bucket the bucket's rule allows. */
export function expectation(domain: string, id: Id): 'allow' | { maxRate: number } {
  if (domain === 'property-api') return { maxRate: 200 }; // its largest per-second limit (the address backstop)
  if (domain !== RLQS_DOMAIN) return 'allow';
  const keys = Object.keys(id);
  if (keys.length !== 1) return { maxRate: 1000 }; // not judged closely: the largest rate of the domain
  const key = keys[0]!;
  const value = Buffer.from(id[key] as Uint8Array | string).toString('utf8');
  if (key === 'tenant') return { maxRate: TENANT_RATE };
  if (key === 'path') return value.startsWith('files/') ? { maxRate: 100 } : 'allow';
  if (key === 'hourly' || key === 'check' || key === 'probe') return { maxRate: 1000 };
  return 'allow'; // `watched` (shadow) and keys no rule names
}

/** What a stream reported: valid ids, and ids past the bounds that must get no action. */
export class Reported {
  private readonly ids = new Map<string, 'valid' | 'bad'>();
  constructor(readonly domain: string) {}

  add(id: Id, bad = false): void {
    const k = idKey(id);
    if (this.ids.get(k) !== 'valid') this.ids.set(k, bad ? 'bad' : 'valid');
  }

  get(id: Id): 'valid' | 'bad' | undefined {
    return this.ids.get(idKey(id));
  }
}

/** One BucketAction (decoded with oneofs): undefined when right, else what is wrong. */
// biome-ignore lint/suspicious/noExplicitAny: a decoded BucketAction, walked field by field
export function judgeAction(a: any, reported: Reported): string | undefined {
  const id: Id = a.bucket_id?.bucket ?? {};
  const seen = reported.get(id);
  if (seen === undefined) return 'an action for a bucket this stream never reported';
  if (seen === 'bad') return 'an action for a bucket id past the bounds (empty, or too long)';
  if (a.abandon_action) return undefined;
  const q = a.quota_assignment_action;
  if (!q) return 'an action with neither an assignment nor abandon_action';
  if (!(Number(q.assignment_time_to_live?.seconds ?? 0) >= 1)) return `TTL ${JSON.stringify(q.assignment_time_to_live)}: Envoy expires it at once`;
  const s = q.rate_limit_strategy;
  const want = expectation(reported.domain, id);
  if (s?.strategy === 'blanket_rule') {
    const deny = (s.blanket_rule ?? 0) === 1 || s.blanket_rule === 'DENY_ALL';
    return deny && want === 'allow' ? 'DENY_ALL for a bucket no rule limits' : undefined;
  }
  if (s?.strategy !== 'token_bucket') return `no strategy (${JSON.stringify(s)}): Envoy discards such an action`;
  if (want === 'allow') return 'a token bucket for a bucket no rule limits';
  const tb = s.token_bucket;
  const fill = Number(tb.fill_interval?.seconds ?? 0);
  const perFill = Number(tb.tokens_per_fill?.value ?? 0);
  const max = Number(tb.max_tokens ?? 0);
  if (fill < 1 || perFill < 1 || max < 1) return `token bucket ${JSON.stringify(tb)}: Envoy would never refill it or divide by zero`;
  if (perFill / fill > want.maxRate || max > Math.max(1, Math.ceil(want.maxRate)))
    return `token bucket ${perFill}/${fill}s (burst ${max}) over the rule's ${want.maxRate}/s`;
  return undefined;
}

/** The first wrong action of the answers, if any. */
export function judgeAnswers(answers: readonly { bucket_action?: unknown[] }[], reported: Reported): string | undefined {
  for (const m of answers)
    for (const a of m.bucket_action ?? []) {
      const problem = judgeAction(a, reported);
      if (problem) return problem;
    }
  return undefined;
}
