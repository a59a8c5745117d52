/** The metrics text rendered at most once per interval, however many scrape at once (round 5: 999 scrapes a second
 * on the unauthenticated listener took decisions' p99 from 6.5 to 62 ms, each scrape a full render on the
 * decisions' thread). A scrape never gets a text rendered before it arrived: it shares the next render, which
 * starts once the interval since the last has passed, so every answer is as fresh as an unshared one and a flood
 * of scrapes costs one render an interval. */
export class SharedRender {
  private lastStart = Number.NEGATIVE_INFINITY;
  /** The render the scrapes waiting now will share, not started yet. */
  private next: Promise<string> | undefined;

  constructor(
    private readonly render: () => Promise<string>,
    readonly intervalMs: number,
    private readonly now: () => number = () => performance.now(),
  ) {}

  text(): Promise<string> {
    if (this.next) return this.next;
    const wait = Math.max(0, this.lastStart + this.intervalMs - this.now());
    const next = new Promise<void>((resolve) => (wait > 0 ? setTimeout(resolve, wait) : setImmediate(resolve))).then(() => {
      // Started: a scrape from now on waits for the next one, which may reflect what this one did not.
      this.next = undefined;
      this.lastStart = this.now();
      return this.render();
    });
    this.next = next;
    return next;
  }
}
