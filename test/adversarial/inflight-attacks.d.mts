/** The types of inflight-attacks.mjs (a plain .mjs file: its attacks run as processes of their own). */
export const INFLIGHT_DOMAIN: string;
export const TENANT_LIMIT: number;
export const POOL_LIMIT: number;
export const INFLIGHT_YAML: string;

export interface AttackOptions {
  address?: string;
  tag: string;
  report(problem: string): void;
  stat(kind: string, n?: number): void;
  note(text: string): void;
}

type Attack = (port: number, signal: AbortSignal, options: AttackOptions) => Promise<void>;
export const inventedTenants: Attack;
export const countGiveBacks: Attack;
export const envoyTimeouts: Attack;
export const ROUND6: Record<'inventedTenants' | 'countGiveBacks' | 'envoyTimeouts', Attack>;
