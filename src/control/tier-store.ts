import type { TierSource } from '../limiter/plan.js';

export interface TierAssignment {
  fingerprint: string;
  tier: string;
  /** ISO time of the assignment. */
  assignedAt: string;
  /** Fingerprint of the admin credential that made it. */
  by: string;
}

/** Tier assignments that can be changed at run time (the admin API). */
export interface TierStore extends TierSource {
  /** True when every replica sees the same assignments (Redis). */
  readonly shared: boolean;
  count(): number;
  assign(a: TierAssignment): Promise<void>;
  remove(fingerprint: string): Promise<boolean>;
  list(): Promise<TierAssignment[]>;
  /** Tells every replica that these counters were reset (so they drop cached "full until" times). */
  announceReset(keys: readonly string[]): Promise<void>;
  onReset(listener: (keys: readonly string[]) => void): void;
  close(): Promise<void>;
}

/** Assignments held in this process: for the memory store, where there is one replica. */
export class MemoryTierStore implements TierStore {
  readonly shared = false;
  private readonly byFingerprint = new Map<string, TierAssignment>();

  tierOf(fingerprint: string): string | undefined {
    return this.byFingerprint.get(fingerprint)?.tier;
  }

  count(): number {
    return this.byFingerprint.size;
  }

  assign(a: TierAssignment): Promise<void> {
    this.byFingerprint.set(a.fingerprint, a);
    return Promise.resolve();
  }

  remove(fingerprint: string): Promise<boolean> {
    return Promise.resolve(this.byFingerprint.delete(fingerprint));
  }

  list(): Promise<TierAssignment[]> {
    return Promise.resolve([...this.byFingerprint.values()]);
  }

  announceReset(): Promise<void> {
    return Promise.resolve();
  }

  onReset(): void {}

  close(): Promise<void> {
    return Promise.resolve();
  }
}
