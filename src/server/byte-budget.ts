/** Bytes of request messages a replica holds, counted before they are held, per connection and in all
 * (port-bounds.ts): a message buffer grows by what arrives, and an inflation takes its whole cap before it runs.
 * A take that would pass either bound is refused and takes nothing, so one connection filling its share refuses
 * only its own calls, and the whole is reached only by many connections (which are bounded per address). */

/** What a call past the budget is told (RESOURCE_EXHAUSTED), on both servers. */
export const BUSY = 'the server holds too many request bytes now; try again';

/** One connection's share: what its calls hold now. */
export interface Ledger {
  held: number;
}

export class ByteBudget {
  private held = 0;
  private readonly ledgers = new WeakMap<object, Ledger>();

  constructor(
    readonly perConnection: number,
    readonly inAll: number,
  ) {}

  /** The ledger of a connection (any object that stands for it: its Http2Session). */
  ledger(connection: object): Ledger {
    let l = this.ledgers.get(connection);
    if (!l) {
      l = { held: 0 };
      this.ledgers.set(connection, l);
    }
    return l;
  }

  /** Takes `n` bytes for `ledger`, or nothing and false when either bound would be passed. */
  take(ledger: Ledger, n: number): boolean {
    if (ledger.held + n > this.perConnection || this.held + n > this.inAll) return false;
    ledger.held += n;
    this.held += n;
    return true;
  }

  give(ledger: Ledger, n: number): void {
    ledger.held -= n;
    this.held -= n;
  }

  /** Bytes held in all, for the metric and tests. */
  get total(): number {
    return this.held;
  }
}

/** What one call holds of a budget, given back once, whatever ends the call; after that it takes nothing more (an
 * inflation still running for a call its client reset would otherwise take bytes that nothing gives back). */
export class Hold {
  private bytes = 0;
  private released = false;

  constructor(
    private readonly budget: ByteBudget,
    private readonly ledger: Ledger,
  ) {}

  take(n: number): boolean {
    if (this.released || !this.budget.take(this.ledger, n)) return false;
    this.bytes += n;
    return true;
  }

  release(): void {
    this.released = true;
    if (this.bytes === 0) return;
    this.budget.give(this.ledger, this.bytes);
    this.bytes = 0;
  }
}
