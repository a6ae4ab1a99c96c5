/**
 * wg_peerd_http_request_duration_seconds: the one histogram every answered request adds to,
 * the list fast path's polls included, kept here rather than in a prom-client Histogram.
 *
 * Why not prom-client's: its observe() validates the label set, builds the label hash string,
 * looks it up, and indexes the buckets by the bound turned into a property name, on every
 * call. A poll of a 1,000-peer list answered from the freshness window does little else, and
 * in a CPU profile of the daemon under 8 polling connections (emulated VM) that observe was
 * 3.6% of the process, the largest single piece after the socket write. Here a series is an
 * object found once (the fast path holds it per status code) and an observation is a bucket
 * search over 12 bounds and three additions.
 *
 * It still lives in the prom-client registry and is written by prom-client's own text
 * formatter: `getForPromString()` answers in the shape prom-client's Histogram gives (per series
 * the cumulative buckets with `le`, `+Inf`, `_sum`, `_count`; the series labels as shared
 * labels), so the exposition is the same text. test/unit/http/request-durations.test.ts holds
 * it equal to a prom-client Histogram fed the same observations.
 */
import type { Registry } from 'prom-client';

export const REQUEST_DURATION_METRIC = 'wg_peerd_http_request_duration_seconds';

/** Upper bounds in seconds, ascending (a poll is milliseconds; a 50,000-peer list seconds). */
export const REQUEST_BUCKETS: readonly number[] = [
  0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
];

const HELP =
  'Time from receiving an HTTP request to the end of its response, by method, route pattern and status code';

/** One label set's counts. */
export class DurationSeries {
  /** Observations per bucket (not cumulative); the last slot counts those above every bound. */
  readonly counts: Float64Array;
  sum = 0;
  count = 0;

  constructor(readonly labels: Readonly<{ method: string; route: string; code: string }>) {
    this.counts = new Float64Array(REQUEST_BUCKETS.length + 1);
  }

  observe(seconds: number): void {
    // prom-client throws on these; a request's 'close' listener is no place to throw.
    if (!Number.isFinite(seconds)) return;
    let i = 0;
    while (i < REQUEST_BUCKETS.length && seconds > REQUEST_BUCKETS[i]!) i++;
    this.counts[i]! += 1;
    this.sum += seconds;
    this.count += 1;
  }
}

/** prom-client's exposition entry (what its Histogram's getForPromString() gives per value). */
interface ExposedValue {
  labels: { le?: number | string };
  sharedLabels: Readonly<Record<string, string>>;
  value: number;
  metricName: string;
}

export class RequestDurations {
  readonly name = REQUEST_DURATION_METRIC;
  readonly help = HELP;
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  private readonly series = new Map<string, DurationSeries>();

  /** Registers it in `registry` as a metric (the registry asks it for its values per scrape). */
  constructor(registry: Registry) {
    // The registry's public registerMetric takes its own metric classes; it only ever calls
    // name, getForPromString()/get() and (on resetMetrics) reset() on what it holds.
    (registry as unknown as { registerMetric(metric: unknown): void }).registerMetric(this);
  }

  /** The series of one label set, created on first use (and shown from then on). */
  seriesOf(method: string, route: string, code: string): DurationSeries {
    const id = `${method} ${route} ${code}`;
    let found = this.series.get(id);
    if (found === undefined) {
      found = new DurationSeries({ method, route, code });
      this.series.set(id, found);
    }
    return found;
  }

  observe(method: string, route: string, code: string, seconds: number): void {
    this.seriesOf(method, route, code).observe(seconds);
  }

  getForPromString(): Promise<{
    name: string;
    help: string;
    type: string;
    values: ExposedValue[];
    aggregator: string;
  }> {
    const values: ExposedValue[] = [];
    const bucket = `${this.name}_bucket`;
    for (const series of this.series.values()) {
      let cumulative = 0;
      for (let i = 0; i < REQUEST_BUCKETS.length; i++) {
        cumulative += series.counts[i]!;
        values.push({
          labels: { le: REQUEST_BUCKETS[i]! },
          sharedLabels: series.labels,
          value: cumulative,
          metricName: bucket,
        });
      }
      values.push(
        {
          labels: { le: '+Inf' },
          sharedLabels: series.labels,
          value: series.count,
          metricName: bucket,
        },
        {
          labels: {},
          sharedLabels: series.labels,
          value: series.sum,
          metricName: `${this.name}_sum`,
        },
        {
          labels: {},
          sharedLabels: series.labels,
          value: series.count,
          metricName: `${this.name}_count`,
        },
      );
    }
    return Promise.resolve({
      name: this.name,
      help: this.help,
      type: this.type,
      values,
      aggregator: this.aggregator,
    });
  }

  /** As prom-client's get(): the series labels merged into each value's own. */
  async get(): Promise<{
    name: string;
    help: string;
    type: string;
    values: unknown[];
    aggregator: string;
  }> {
    const data = await this.getForPromString();
    return {
      ...data,
      values: data.values.map(({ labels, sharedLabels, ...rest }) => ({
        ...rest,
        labels: { ...labels, ...sharedLabels },
      })),
    };
  }

  reset(): void {
    this.series.clear();
  }
}
