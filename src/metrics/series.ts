import type { Registry } from 'prom-client';

/** Counters and histograms whose observation allocates nothing: a decision adds to plain numbers, and
 * prom-client's registry reads them at scrape time (formatting stays prom-client's). prom-client's own
 * inc/observe build a label hash string and a closure per call, which was the largest share of a decision's
 * garbage. Used for the metrics every decision touches; the rest stay plain prom-client metrics. */

type Labels = Record<string, string>;

interface MetricValue {
  labels: Labels;
  value: number;
  metricName?: string;
}

/** One labelled counter series: `inc` is a number addition. */
export class CounterSeries {
  value = 0;
  constructor(readonly labels: Labels) {}
  inc(by = 1): void {
    this.value += by;
  }
}

/** Series are created once per label set (on first use, off the hot path) and kept. */
abstract class Family<S extends { labels: Labels }> {
  readonly aggregator = 'sum';
  private readonly series = new Map<string, S>();

  constructor(
    readonly name: string,
    readonly help: string,
    registry: Registry,
  ) {
    registry.registerMetric(this as unknown as Parameters<Registry['registerMetric']>[0]);
  }

  /** The series of these labels. Builds a key: call it when a child is made, not per observation. */
  labels(labels: Labels): S {
    const key = JSON.stringify(labels);
    let s = this.series.get(key);
    if (!s) {
      s = this.create(labels);
      this.series.set(key, s);
    }
    return s;
  }

  protected abstract create(labels: Labels): S;
  protected abstract values(s: S): MetricValue[];
  abstract readonly type: string;

  get(): { name: string; help: string; type: string; aggregator: string; values: MetricValue[] } {
    const values: MetricValue[] = [];
    for (const s of this.series.values()) values.push(...this.values(s));
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  }

  reset(): void {
    this.series.clear();
  }
}

export class FastCounter extends Family<CounterSeries> {
  readonly type = 'counter';
  protected create(labels: Labels): CounterSeries {
    return new CounterSeries(labels);
  }
  protected values(s: CounterSeries): MetricValue[] {
    return [{ labels: s.labels, value: s.value }];
  }
}

/** One labelled histogram series: `observe` finds a bucket and adds. */
export class HistogramSeries {
  sum = 0;
  count = 0;
  readonly counts: Float64Array;
  constructor(
    readonly labels: Labels,
    readonly bounds: readonly number[],
  ) {
    this.counts = new Float64Array(bounds.length);
  }
  observe(v: number): void {
    this.sum += v;
    this.count++;
    for (let i = 0; i < this.bounds.length; i++) {
      if (v <= this.bounds[i]!) {
        this.counts[i]!++;
        return;
      }
    }
  }
}

export class FastHistogram extends Family<HistogramSeries> {
  readonly type = 'histogram';
  constructor(
    name: string,
    help: string,
    registry: Registry,
    private readonly bounds: readonly number[],
  ) {
    super(name, help, registry);
  }
  protected create(labels: Labels): HistogramSeries {
    return new HistogramSeries(labels, this.bounds);
  }
  /** Cumulative buckets with `le`, then +Inf, sum and count, as Prometheus reads a histogram. */
  protected values(s: HistogramSeries): MetricValue[] {
    const out: MetricValue[] = [];
    let acc = 0;
    s.bounds.forEach((le, i) => {
      acc += s.counts[i]!;
      out.push({ labels: { ...s.labels, le: String(le) }, value: acc, metricName: `${this.name}_bucket` });
    });
    out.push({ labels: { ...s.labels, le: '+Inf' }, value: s.count, metricName: `${this.name}_bucket` });
    out.push({ labels: s.labels, value: s.sum, metricName: `${this.name}_sum` });
    out.push({ labels: s.labels, value: s.count, metricName: `${this.name}_count` });
    return out;
  }
}

/** One unlabelled series read at scrape time from something that may not answer (Redis's INFO): no value at all
 * when the read fails, where prom-client's own gauge would show a 0 that looks like a reading. `aggregator`:
 * how --workers combines the workers' values. */
export class ScrapedSeries {
  constructor(
    readonly name: string,
    readonly help: string,
    readonly type: 'gauge' | 'counter',
    readonly aggregator: 'max' | 'sum',
    private readonly read: () => Promise<number | undefined>,
    registry: Registry,
  ) {
    registry.registerMetric(this as unknown as Parameters<Registry['registerMetric']>[0]);
  }

  async get(): Promise<{ name: string; help: string; type: string; aggregator: string; values: MetricValue[] }> {
    const value = await this.read();
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values: value === undefined ? [] : [{ labels: {}, value }] };
  }

  reset(): void {}
}

/** The series cached in `map` under `key`, made by `make` on its first use: the hot path builds no label set
 * for a series it has seen. */
export function cachedSeries<T>(map: Map<string, T>, key: string, make: () => T): T {
  let c = map.get(key);
  if (!c) {
    c = make();
    map.set(key, c);
  }
  return c;
}
