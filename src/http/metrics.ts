/**
 * GET /metrics in the Prometheus text exposition format 0.0.4 (DESIGN §3 "Observability", §5).
 *
 * Two halves, concatenated at each scrape:
 * - the daemon's own metrics (request and kernel-read durations, snapshot age, kernel errors,
 *   process metrics) live in a prom-client registry of their own: this file, the exposition;
 * - the per-peer series and the peer aggregates, rendered as text from the SAME
 *   `service.snapshot()` the list answers from (peer-metrics.ts), memoized per snapshot object
 *   (a WeakMap), so scrapes that share a snapshot render it once.
 * With `Accept-Encoding: gzip` the answer is gzip (metrics-gzip.ts): the peer half compressed
 * once per snapshot too, the own half per scrape. Once a snapshot's peer half is compressed its
 * text is let go, and a plain scrape of that snapshot inflates the compressed run as it writes
 * it: the daemon never holds both (issue 29: 51 MB of text beside 17.5 MB of gzip at 50,000
 * capped peers).
 * Request durations are labelled with the route table's label of the route a request matched
 * (routes.ts, through request-log.ts's RouteFacts), never parsed out of Express's state.
 */
import type { Writable } from 'node:stream';
import zlib from 'node:zlib';
import type { RequestHandler } from 'express';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { KernelObserver, PeerServiceApi, PeerSnapshot } from '../peers';
import { negotiateEncoding, type BodyEncoding } from './list-body';
import { EMPTY_FINAL_RUN, finalRun, gzipMember, leadingRun, type DeflateRun } from './metrics-gzip';
import { renderPeerMetrics } from './peer-metrics';
import { RequestDurations, type DurationSeries } from './request-durations';
import { registerServiceMetrics, type ServiceMetricsOptions } from './service-metrics';
import { routeOf } from './request-log';

export {
  AGGREGATE_METRIC,
  PEER_METRIC,
  STATUS_LABELS,
  escapeLabelValue,
  renderPeerMetrics,
  type StatusLabel,
} from './peer-metrics';

/** The exposition format this endpoint writes (both halves are text format 0.0.4). */
export const METRICS_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

export interface MetricsOptions {
  /** Only `snapshot()` is used: the shared kernel read behind the list. */
  service: Pick<PeerServiceApi, 'snapshot'>;
  /** false drops the per-peer series (`--metrics-per-peer=false`); the aggregates stay. */
  perPeer: boolean;
  /** Milliseconds since the epoch; for the snapshot age. */
  now?: () => number;
  /** Process metrics (CPU, memory, event loop, ...); off in tests that build many registries. */
  processMetrics?: boolean;
  /** Build info, readiness (service-metrics.ts); without it, no wg_peerd_build_info. */
  build?: ServiceMetricsOptions;
}

/** Records one request's duration under a fixed method and route, by status code. */
export type RequestTimer = (code: number, seconds: number) => void;

export interface Metrics {
  /** Give it to PeerService: counts kernel reads and failures. */
  observer: KernelObserver;
  /** Mount first: records each request's duration by route pattern and status code. */
  requestMetrics: RequestHandler;
  /**
   * The same duration series for requests answered outside Express (the list fast path): an
   * observer of one method and route, taking the status code and the seconds.
   */
  requestTimer(method: string, route: string): RequestTimer;
  /** GET /metrics. */
  handler: RequestHandler;
  /** The daemon's own metrics (for tests and for other modules that want to register some). */
  registry: Registry;
  /** Compressions of a snapshot's peer half run since start (for tests: one per snapshot). */
  readonly peerCompressions: () => number;
  /** What is held of a snapshot's peer half, its text and its gzip run (for tests). */
  readonly peerHalfHeld: (snapshot: PeerSnapshot) => { text: boolean; run: boolean };
}

/** GET /metrics offers gzip alone (what Prometheus asks for). */
const METRICS_ENCODINGS: ReadonlySet<BodyEncoding> = new Set(['identity', 'gzip']);

// ---------------------------------------------------------------------------------------------
// The factory.

/** Kernel reads take a millisecond on a small host and seconds with 50,000 peers. */
const KERNEL_READ_BUCKETS = [
  0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
];

const LINT_FAILING_DEFAULTS = [
  'nodejs_active_handles_total',
  'nodejs_active_requests_total',
  'nodejs_active_resources_total',
];

export function createMetrics(options: MetricsOptions): Metrics {
  const now = options.now ?? Date.now;
  const registry = new Registry();
  if (options.processMetrics !== false) {
    collectDefaultMetrics({ register: registry });
    // prom-client exposes these three sums as gauges named `_total`, which `promtool check
    // metrics` rejects (only counters end in _total); the same figures by type stay available
    // as nodejs_active_handles, nodejs_active_requests and nodejs_active_resources.
    for (const name of LINT_FAILING_DEFAULTS) registry.removeSingleMetric(name);
  }

  const service = registerServiceMetrics(registry, options.build ?? null);
  const requestDuration = new RequestDurations(registry);
  const kernelRead = new Histogram({
    name: 'wg_peerd_kernel_read_duration_seconds',
    help: 'Duration of the shared kernel read behind the list and the metrics (WireGuard dump, speed limits, data caps); its _count is the number of reads',
    labelNames: ['result'] as const,
    buckets: KERNEL_READ_BUCKETS,
    registers: [registry],
  });
  const kernelErrors = new Counter({
    name: 'wg_peerd_kernel_errors_total',
    help: 'Failed kernel calls by facility (wireguard, link, shaper, quota) and error code',
    labelNames: ['facility', 'code'] as const,
    registers: [registry],
  });
  const snapshotAge = new Gauge({
    name: 'wg_peerd_snapshot_age_seconds',
    help: 'Age of the kernel read this scrape was answered from, at the scrape',
    registers: [registry],
  });
  const snapshotUp = new Gauge({
    name: 'wg_peerd_snapshot_up',
    help: '1 when this scrape could read the kernel (the peer series are present), 0 when the read failed (see wg_peerd_kernel_errors_total)',
    registers: [registry],
  });
  // Present from the start at 0, so a rate() over them works before the first failure.
  kernelRead.zero({ result: 'ok' });
  kernelRead.zero({ result: 'error' });

  const observer: KernelObserver = {
    kernelRead(ms, ok) {
      kernelRead.observe({ result: ok ? 'ok' : 'error' }, ms / 1000);
    },
    kernelError(facility, code) {
      kernelErrors.inc({ facility, code });
    },
  };

  const requestMetrics: RequestHandler = (req, res, next) => {
    const started = process.hrtime.bigint();
    res.on('close', () => {
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      // The label of the route the request matched; 'unmatched' for 401s before routing and 404s.
      const route = routeOf(res)?.label ?? 'unmatched';
      requestDuration.observe(req.method, route, String(res.statusCode), seconds);
    });
    next();
  };

  const requestTimer = (method: string, route: string): RequestTimer => {
    // The series per code, held: the very ones requestMetrics feeds, found once.
    const byCode = new Map<number, DurationSeries>();
    return (code, seconds) => {
      let series = byCode.get(code);
      if (series === undefined) {
        series = requestDuration.seriesOf(method, route, String(code));
        byCode.set(code, series);
      }
      series.observe(seconds);
    };
  };

  // Each snapshot's peer half: its text (rendered once, in flight or done) until its gzip run
  // exists, then that run alone. The text is 51 MB at 50,000 capped peers, its run a third of
  // it: once compressed, a plain scrape of the same snapshot inflates the run as it writes it
  // (a stream, never the whole text again) rather than the daemon holding both (issue 29).
  const halves = new WeakMap<PeerSnapshot, PeerHalf>();
  const halfOf = (snapshot: PeerSnapshot): PeerHalf => {
    let half = halves.get(snapshot);
    if (half === undefined) {
      half = { text: null, run: null };
      halves.set(snapshot, half);
    }
    return half;
  };
  const peerText = (snapshot: PeerSnapshot): Promise<Buffer[]> => {
    const half = halfOf(snapshot);
    half.text ??= renderPeerMetrics(snapshot, options.perPeer);
    return half.text;
  };

  let peerCompressions = 0;
  const peerRun = (snapshot: PeerSnapshot): Promise<DeflateRun> => {
    const half = halfOf(snapshot);
    if (half.run === null) {
      peerCompressions += 1;
      const run = peerText(snapshot).then(finalRun);
      half.run = run;
      run.then(
        // Compressed: the text goes (scrapes writing it hold their own reference meanwhile).
        () => {
          if (half.run === run) half.text = null;
        },
        // A failed compression is not kept: the next scrape tries again.
        () => {
          if (half.run === run) half.run = null;
        },
      );
    }
    return half.run;
  };

  /** The plain peer half: the text while it is held, else the compressed run inflated. */
  const plainPeers = async (snapshot: PeerSnapshot): Promise<PlainPeers> => {
    const half = halfOf(snapshot);
    if (half.text === null && half.run !== null) {
      const run = await half.run.catch(() => null);
      if (run !== null && half.text === null) return { inflate: run };
    }
    return { chunks: await peerText(snapshot) };
  };

  const handler: RequestHandler = (req, res, next) => {
    const encoding = negotiateEncoding(req.headers['accept-encoding'], METRICS_ENCODINGS);
    const scrape = async (): Promise<void> => {
      let snapshot: PeerSnapshot | null = null;
      try {
        snapshot = await options.service.snapshot();
      } catch {
        // The read's failure is already counted (observer); the daemon's own metrics are still
        // worth scraping, most of all when the kernel fails.
      }
      service.observe(snapshot);
      let peers: PlainPeers = { chunks: [] };
      if (snapshot === null) {
        snapshotUp.set(0);
        snapshotAge.set(NaN); // no read to be old
      } else {
        snapshotUp.set(1);
        snapshotAge.set(Math.max(0, now() - snapshot.takenAt) / 1000);
        if (encoding !== 'gzip') peers = await plainPeers(snapshot);
      }
      const own = Buffer.from(await registry.metrics(), 'utf8');
      let body: Buffer[] = [own];
      if (encoding === 'gzip') {
        const last = snapshot === null ? EMPTY_FINAL_RUN : await peerRun(snapshot);
        body = gzipMember(await leadingRun(own), last);
      } else if ('chunks' in peers) {
        body.push(...peers.chunks);
      }
      // Not res.send(): it would rewrite the Content-Type (parameters reordered), and
      // Prometheus documents this exact header. The memoized peer chunks are written as they
      // are, not copied into one body.
      let length = body.reduce((sum, chunk) => sum + chunk.length, 0);
      if ('inflate' in peers) length += peers.inflate.length;
      res.status(200).setHeader('Content-Type', METRICS_CONTENT_TYPE);
      res.setHeader('Content-Length', length);
      res.setHeader('Vary', 'Accept-Encoding');
      if (encoding === 'gzip') res.setHeader('Content-Encoding', 'gzip');
      res.cork();
      for (const chunk of body) res.write(chunk);
      if ('inflate' in peers) {
        res.uncork();
        writeInflated(peers.inflate, res);
        return;
      }
      res.end();
      res.uncork();
    };
    scrape().catch(next);
  };

  return {
    observer,
    requestMetrics,
    requestTimer,
    handler,
    registry,
    peerCompressions: () => peerCompressions,
    peerHalfHeld: (snapshot) => {
      const half = halves.get(snapshot);
      return { text: (half?.text ?? null) !== null, run: (half?.run ?? null) !== null };
    },
  };
}

/** A snapshot's peer half: its text until its gzip run is made, then the run alone. */
interface PeerHalf {
  text: Promise<Buffer[]> | null;
  run: Promise<DeflateRun> | null;
}

/** What a plain scrape writes of the peer half: the text's chunks, or the run to inflate. */
type PlainPeers = { chunks: readonly Buffer[] } | { inflate: DeflateRun };

/**
 * Writes the text of a peer run by inflating its blocks into the response as it goes (zlib on
 * the thread pool, with the response's backpressure): the whole text is never held. A run that
 * does not inflate (it always does: the daemon deflated it) ends the response short, which the
 * client sees as a broken answer (its Content-Length is not met), never as wrong metrics.
 */
function writeInflated(run: DeflateRun, res: Writable): void {
  const inflate = zlib.createInflateRaw();
  inflate.on('error', () => res.destroy());
  // A client gone before the end: the inflation stops with it (its zlib state freed now).
  res.on('close', () => inflate.destroy());
  inflate.pipe(res);
  for (const block of run.blocks) inflate.write(block);
  inflate.end();
}
