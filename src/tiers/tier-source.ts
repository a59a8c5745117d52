/** Which tier a client (by token fingerprint) belongs to. Synchronous on purpose: a decision never waits
 * for a tier lookup; implementations answer from what they already know. */
export interface TierSource {
  tierOf(fingerprint: string): string | undefined;
  /** How many clients are assigned, for metrics. */
  count?(): number;
}

export const noTiers: TierSource = { tierOf: () => undefined };

/** Assignments held in this process. */
export class MemoryTierSource implements TierSource {
  private readonly byFingerprint = new Map<string, string>();
  tierOf(fingerprint: string): string | undefined {
    return this.byFingerprint.get(fingerprint);
  }
  assign(fingerprint: string, tier: string): void {
    this.byFingerprint.set(fingerprint, tier);
  }
  remove(fingerprint: string): boolean {
    return this.byFingerprint.delete(fingerprint);
  }
  count(): number {
    return this.byFingerprint.size;
  }
  list(): [string, string][] {
    return [...this.byFingerprint];
  }
}
