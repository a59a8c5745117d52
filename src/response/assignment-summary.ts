/** One answered RLQS report, as its span and its decision-log line both show it (src/tracing/tracing.ts,
 * src/observe/decision-log.ts): configured names, counts and fingerprints only. */
export interface AssignmentSummary {
  /** The domain when configured; undefined for one no config names (its text is the client's). */
  domain: string | undefined;
  /** The Envoy instance's fingerprint. */
  instance: string;
  buckets: number;
  allowed: number;
  denied: number;
  strategies: Record<'token_bucket' | 'allow_all' | 'deny_all' | 'abandon', number>;
  /** Rules of the buckets refused outright (DENY_ALL), each once, at most MAX_RULES of them. */
  denyRules: string[];
  /** The error's class when the store did not answer for some or all of the report's buckets. */
  failure?: string;
}

export const MAX_RULES = 20;
