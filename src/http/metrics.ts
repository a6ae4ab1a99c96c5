/**
 * GET /metrics in the Prometheus text exposition format 0.0.4 (DESIGN §3 "Observability", §5).
 *
 * Two halves, concatenated at each scrape:
 * - the daemon's own metrics (request and kernel-read durations, snapshot age, kernel errors,
 *   process metrics) live in a prom-client registry of their own;
 * - the per-peer series and the peer aggregates are rendered as text from the SAME
 *   `service.snapshot()` the list answers from, so a scrape never costs an extra kernel dump and
 *   agrees with a list taken at the same time. They are written by hand rather than through
 *   prom-client gauges because 50,000 peers make about 400,000 series: prom-client would keep a
 *   label-set object per series, reset and refill them on every scrape and hash every label set,
 *   while one pass over the snapshot builds the same text directly. The rendering is memoized
 *   per snapshot object (a WeakMap), so scrapes that share a snapshot render it once, and it
 *   yields to the event loop every 1,000 peers (bench/metrics.ts measures it).
 */
import type { Request, RequestHandler } from 'express';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { RequestDurations, type DurationSeries } from './request-durations';
import {
  ALIVE,
  DEAD,
  livenessOf,
  tunnelAddressOf,
  type KernelObserver,
  type LimitState,
  type PeerServiceApi,
  type PeerSnapshot,
} from '../peers';

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
}

// ---------------------------------------------------------------------------------------------
// Text rendering of the per-peer families.

/** Label value escaping of the text format: backslash, double quote and line feed. */
export function escapeLabelValue(value: string): string {
  // Keys and addresses never need it: test once instead of three replaces per value.
  if (!NEEDS_ESCAPE.test(value)) return value;
  return value.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
}
const NEEDS_ESCAPE = /[\\"\n]/;

/** HELP text escaping of the text format: backslash and line feed. */
function escapeHelp(text: string): string {
  return text.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
}

/** A number as the text format writes it (Go's ParseFloat reads JavaScript's forms). */
function formatValue(value: number): string {
  if (Number.isNaN(value)) return 'NaN';
  if (value === Infinity) return '+Inf';
  if (value === -Infinity) return '-Inf';
  return String(value);
}

type MetricType = 'gauge' | 'counter';

/** One metric family being written: HELP and TYPE once, then its samples. */
class Family {
  /** Lines since the last flush. */
  private pending: string[] = [];
  /** Flushed slices, each the lines of up to one slice of peers, already UTF-8. */
  private readonly slices: Buffer[] = [];
  constructor(
    readonly name: string,
    private readonly type: MetricType,
    private readonly help: string,
  ) {}

  add(labels: string, value: number): void {
    this.pending.push(`${this.name}${labels} ${formatValue(value)}\n`);
  }

  /**
   * Joins and encodes the pending lines. Done once per slice of peers, so the end of a render
   * copies a few hundred buffers instead of joining and encoding 250,000 strings in one go.
   */
  flush(): void {
    if (this.pending.length === 0) return;
    this.slices.push(Buffer.from(this.pending.join(''), 'utf8'));
    this.pending = [];
  }

  /** The family's text; a family without samples still says HELP and TYPE. */
  render(): Buffer[] {
    this.flush();
    const head = `# HELP ${this.name} ${escapeHelp(this.help)}\n# TYPE ${this.name} ${this.type}\n`;
    return [Buffer.from(head, 'utf8'), ...this.slices];
  }
}

function labelSet(labels: ReadonlyArray<readonly [string, string]>): string {
  return `{${labels.map(([name, value]) => `${name}="${escapeLabelValue(value)}"`).join(',')}}`;
}

/** Status label values: the list's ALIVE / DEAD, and `never` for "No handshake yet". */
export const STATUS_LABELS = ['alive', 'dead', 'never'] as const;
export type StatusLabel = (typeof STATUS_LABELS)[number];

/** Per-peer family names (one place, so the README and the tests can follow them). */
export const PEER_METRIC = {
  lastHandshake: 'wg_peerd_peer_last_handshake_timestamp_seconds',
  status: 'wg_peerd_peer_status',
  receive: 'wg_peerd_peer_receive_bytes_total',
  transmit: 'wg_peerd_peer_transmit_bytes_total',
  speedLimit: 'wg_peerd_peer_speed_limit_bytes_per_second',
  capQuota: 'wg_peerd_peer_data_cap_bytes',
  capUsed: 'wg_peerd_peer_data_cap_used_bytes',
  capExhausted: 'wg_peerd_peer_data_cap_exhausted',
} as const;

export const AGGREGATE_METRIC = {
  byStatus: 'wg_peerd_peers',
  limited: 'wg_peerd_peers_speed_limited',
  capped: 'wg_peerd_peers_data_capped',
  exhausted: 'wg_peerd_peers_data_cap_exhausted',
} as const;

/**
 * The speed-limit series of one peer, one per direction that holds in the kernel (download: the
 * interface's egress; upload: the IFB), so a limit lost on one device shows as one series.
 */
function renderSpeedLimit(family: Family, peerLabels: string, limit: LimitState): void {
  if (limit.download !== null) family.add(`{${peerLabels},direction="download"}`, limit.download);
  if (limit.upload !== null) family.add(`{${peerLabels},direction="upload"}`, limit.upload);
}

/** Peers rendered between two turns of the event loop (some 10 ms of work each). */
const PEERS_PER_SLICE = 1000;

function yieldToEventLoop(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/**
 * The per-peer families and the aggregates of one snapshot. Statuses are computed at the
 * snapshot's own time (`takenAt`), so every scrape of one snapshot gives the same text.
 */
export async function renderPeerMetrics(
  snapshot: PeerSnapshot,
  perPeer: boolean,
  pause: () => Promise<void> = yieldToEventLoop,
): Promise<Buffer[]> {
  const f = {
    lastHandshake: new Family(
      PEER_METRIC.lastHandshake,
      'gauge',
      'UNIX time of the last handshake of the peer, in seconds; absent when there never was one',
    ),
    status: new Family(
      PEER_METRIC.status,
      'gauge',
      'Always 1; the status label is alive (handshake at most 150 s old), dead (older) or never (no handshake yet)',
    ),
    receive: new Family(
      PEER_METRIC.receive,
      'counter',
      'Bytes received from the peer through the tunnel, as the WireGuard device counts them',
    ),
    transmit: new Family(
      PEER_METRIC.transmit,
      'counter',
      'Bytes sent to the peer through the tunnel, as the WireGuard device counts them',
    ),
    speedLimit: new Family(
      PEER_METRIC.speedLimit,
      'gauge',
      'Speed limit of the peer in bytes per second, per direction (download, upload) that holds in the kernel; absent when none does',
    ),
    capQuota: new Family(
      PEER_METRIC.capQuota,
      'gauge',
      'Data cap of the peer in bytes, both directions together; absent when the peer has none',
    ),
    capUsed: new Family(
      PEER_METRIC.capUsed,
      'gauge',
      'Bytes counted against the data cap of the peer; absent when the peer has no cap',
    ),
    capExhausted: new Family(
      PEER_METRIC.capExhausted,
      'gauge',
      "1 when the peer's bytes used reached its data cap (its traffic is dropped), else 0; absent when the peer has no cap",
    ),
  };
  const counts: Record<StatusLabel, number> = { alive: 0, dead: 0, never: 0 };
  let limited = 0;
  let capped = 0;
  let exhausted = 0;

  let sincePause = 0;
  for (const peer of snapshot.device.peers) {
    // 50,000 peers take most of a second to render: let other requests in between (DESIGN §5).
    if (++sincePause === PEERS_PER_SLICE) {
      sincePause = 0;
      for (const family of Object.values(f)) family.flush();
      await pause();
    }
    const ip = tunnelAddressOf(peer);
    const { status } = livenessOf(peer.lastHandshake, snapshot.takenAt);
    const statusLabel: StatusLabel =
      status === ALIVE ? 'alive' : status === DEAD ? 'dead' : 'never';
    counts[statusLabel] += 1;
    const limit = ip === null ? undefined : snapshot.limits.get(ip);
    const cap = ip === null ? undefined : snapshot.caps.get(ip);
    const isExhausted = cap !== undefined && cap.usedBytes >= cap.quotaBytes;
    if (limit !== undefined) limited += 1;
    if (cap !== undefined) capped += 1;
    if (isExhausted) exhausted += 1;
    if (!perPeer) continue;

    // A peer without an IPv4 /32 (added by other tools) has ip="" rather than no label, so
    // every series of a family has the same label names.
    const peerLabels = `public_key="${escapeLabelValue(peer.publicKey)}",ip="${ip ?? ''}"`;
    const labels = `{${peerLabels}}`;
    if (peer.lastHandshake !== null) {
      f.lastHandshake.add(labels, Math.floor(peer.lastHandshake.getTime() / 1000));
    }
    f.status.add(`{${peerLabels},status="${statusLabel}"}`, 1);
    f.receive.add(labels, peer.rxBytes);
    f.transmit.add(labels, peer.txBytes);
    if (limit !== undefined) renderSpeedLimit(f.speedLimit, peerLabels, limit);
    if (cap !== undefined) {
      f.capQuota.add(labels, cap.quotaBytes);
      f.capUsed.add(labels, cap.usedBytes);
      f.capExhausted.add(labels, isExhausted ? 1 : 0);
    }
  }

  const byStatus = new Family(
    AGGREGATE_METRIC.byStatus,
    'gauge',
    'Peers of the interface by status: alive, dead, never (no handshake yet)',
  );
  for (const label of STATUS_LABELS) byStatus.add(labelSet([['status', label]]), counts[label]);
  const aggregates = [
    byStatus,
    new Family(AGGREGATE_METRIC.limited, 'gauge', 'Peers with a speed limit'),
    new Family(AGGREGATE_METRIC.capped, 'gauge', 'Peers with a data cap'),
    new Family(
      AGGREGATE_METRIC.exhausted,
      'gauge',
      'Peers whose bytes used reached their data cap',
    ),
  ];
  aggregates[1]!.add('', limited);
  aggregates[2]!.add('', capped);
  aggregates[3]!.add('', exhausted);

  const families = perPeer ? [...Object.values(f), ...aggregates] : aggregates;
  // Chunks, not one buffer: joining 30 MB (50,000 peers) would block the event loop once more.
  return families.flatMap((family) => family.render());
}

// ---------------------------------------------------------------------------------------------
// Route labels.

/**
 * The route pattern a request matched, never its raw path (which holds a peer's key and would
 * make one series per key). String routes give their pattern; the regular-expression routes of
 * app.ts give a readable one ("/api/peer/:publicKey/speed-limit"). Requests no route answered
 * (401 before routing, unknown paths) share the label "unmatched".
 */
export function routeLabel(req: Request): string {
  const route = (req as { route?: { path?: unknown } }).route;
  const pattern = route?.path;
  if (typeof pattern === 'string') return `${req.baseUrl}${pattern}`;
  if (pattern instanceof RegExp) {
    const readable = pattern.source
      .replace(/^\^/, '')
      .replace(/\\\/\?\$$|\/\?\$$|\$$/, '')
      .replace(/\(\.\+\??\)/g, ':publicKey')
      .replace(/\\\//g, '/');
    return `${req.baseUrl}${readable}`;
  }
  return 'unmatched';
}

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
      requestDuration.observe(req.method, routeLabel(req), String(res.statusCode), seconds);
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

  // The rendering in flight or done, so scrapes sharing a snapshot share its text.
  const rendered = new WeakMap<PeerSnapshot, Promise<Buffer[]>>();
  const peerText = (snapshot: PeerSnapshot): Promise<Buffer[]> => {
    let text = rendered.get(snapshot);
    if (text === undefined) {
      text = renderPeerMetrics(snapshot, options.perPeer);
      rendered.set(snapshot, text);
    }
    return text;
  };

  const handler: RequestHandler = (_req, res, next) => {
    const scrape = async (): Promise<void> => {
      let snapshot: PeerSnapshot | null = null;
      try {
        snapshot = await options.service.snapshot();
      } catch {
        // The read's failure is already counted (observer); the daemon's own metrics are still
        // worth scraping, most of all when the kernel fails.
      }
      let peers: Buffer[] = [];
      if (snapshot === null) {
        snapshotUp.set(0);
        snapshotAge.set(NaN); // no read to be old
      } else {
        snapshotUp.set(1);
        snapshotAge.set(Math.max(0, now() - snapshot.takenAt) / 1000);
        peers = await peerText(snapshot);
      }
      const own = Buffer.from(await registry.metrics(), 'utf8');
      // Not res.send(): it would rewrite the Content-Type (parameters reordered), and
      // Prometheus documents this exact header. The memoized peer chunks are written as they
      // are, not copied into one body.
      const length = peers.reduce((sum, chunk) => sum + chunk.length, own.length);
      res.status(200).setHeader('Content-Type', METRICS_CONTENT_TYPE);
      res.setHeader('Content-Length', length);
      res.cork();
      res.write(own);
      for (const chunk of peers) res.write(chunk);
      res.end();
      res.uncork();
    };
    scrape().catch(next);
  };

  return { observer, requestMetrics, requestTimer, handler, registry };
}
