/** Keys by a size of theirs (a counter's holders, its open reservations), and the largest: where the memory
 * store makes room when a bound every counter shares is reached, so the counter that holds most pays, never a
 * newcomer (memory-slots.ts, memory-reservations.ts). Each change costs O(1); finding the largest, amortized. */
export class SizeIndex {
  private readonly bySize = new Map<number, Set<string>>();
  private top = 0;

  /** Moves a key from one size to another (0: not indexed). */
  resized(key: string, from: number, to: number): void {
    if (from > 0) {
      const was = this.bySize.get(from);
      if (was?.delete(key) && was.size === 0) this.bySize.delete(from);
    }
    if (to <= 0) return;
    const now = this.bySize.get(to);
    if (now) now.add(key);
    else this.bySize.set(to, new Set([key]));
    if (to > this.top) this.top = to;
  }

  /** A key of the largest size, undefined when none is indexed. */
  largest(): string | undefined {
    while (this.top > 0 && !this.bySize.get(this.top)?.size) this.top--;
    return this.bySize.get(this.top)?.values().next().value;
  }

  clear(): void {
    this.bySize.clear();
    this.top = 0;
  }
}
