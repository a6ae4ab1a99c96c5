/**
 * The per-peer half of GET /metrics (metrics.ts serves both halves): the per-peer series and
 * the peer aggregates of one snapshot, in the Prometheus text format 0.0.4, from the peer view
 * (src/peers/view.ts) the list body writes too.
 *
 * Written by hand rather than through prom-client gauges because 50,000 peers make about
 * 400,000 series: prom-client would keep a label-set object per series, reset and refill them
 * on every scrape and hash every label set, while one pass over the snapshot builds the same
 * text directly. The pass yields to the event loop every 1,000 peers (bench/metrics.ts
 * measures it).
 */
import { ALIVE, DEAD, inSlices, viewOf, type LimitState, type PeerSnapshot } from '../peers';

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
  speedLimitEnforced: 'wg_peerd_peer_speed_limit_enforced',
  capQuota: 'wg_peerd_peer_data_cap_bytes',
  capUsed: 'wg_peerd_peer_data_cap_used_bytes',
  capEnforced: 'wg_peerd_peer_data_cap_enforced',
  capExhausted: 'wg_peerd_peer_data_cap_exhausted',
  capPreviousPeriod: 'wg_peerd_peer_data_cap_previous_period_used_bytes',
  capThrottled: 'wg_peerd_peer_data_cap_throttled',
  suspended: 'wg_peerd_peer_suspended',
  expiresAt: 'wg_peerd_peer_expires_at_timestamp_seconds',
  ipv6: 'wg_peerd_peer_ipv6_info',
} as const;

export const AGGREGATE_METRIC = {
  byStatus: 'wg_peerd_peers',
  limited: 'wg_peerd_peers_speed_limited',
  limitsLost: 'wg_peerd_peers_speed_limit_not_enforced',
  capped: 'wg_peerd_peers_data_capped',
  capsLost: 'wg_peerd_peers_data_cap_not_enforced',
  exhausted: 'wg_peerd_peers_data_cap_exhausted',
  throttled: 'wg_peerd_peers_data_cap_throttled',
  suspended: 'wg_peerd_peers_suspended',
  expired: 'wg_peerd_peers_expired',
} as const;

/**
 * The speed-limit series of one peer: the rate per direction that holds in the kernel
 * (download: the interface's egress; upload: the IFB), and per direction whether it holds, so
 * a limit lost on one device shows as one rate and an enforced 0.
 */
function renderSpeedLimit(
  rate: Family,
  enforced: Family,
  peerLabels: string,
  limit: LimitState,
): void {
  const download = `{${peerLabels},direction="download"}`;
  const upload = `{${peerLabels},direction="upload"}`;
  if (limit.download !== null) rate.add(download, limit.download);
  if (limit.upload !== null) rate.add(upload, limit.upload);
  enforced.add(download, limit.download === null ? 0 : 1);
  enforced.add(upload, limit.upload === null ? 0 : 1);
}

/**
 * The per-peer families and the aggregates of one snapshot. Statuses are computed at the
 * snapshot's own time (`takenAt`), so every scrape of one snapshot gives the same text.
 */
export async function renderPeerMetrics(
  snapshot: PeerSnapshot,
  perPeer: boolean,
  pause?: () => Promise<void>,
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
    speedLimitEnforced: new Family(
      PEER_METRIC.speedLimitEnforced,
      'gauge',
      "1 when the peer's speed limit holds in the kernel in this direction (download, upload), 0 when it was lost there while it holds in the other; absent when the peer has no limit",
    ),
    capQuota: new Family(
      PEER_METRIC.capQuota,
      'gauge',
      'Data cap of the peer in bytes, both directions together; absent when the peer has none',
    ),
    capUsed: new Family(
      PEER_METRIC.capUsed,
      'gauge',
      'Bytes counted against the data cap of the peer (as last seen when the cap is not enforced); absent when the peer has no cap',
    ),
    capEnforced: new Family(
      PEER_METRIC.capEnforced,
      'gauge',
      '1 when the kernel enforces the data cap of the peer, 0 when the kernel lost it (listed as last seen until the next write repairs it); absent when the peer has no cap',
    ),
    capExhausted: new Family(
      PEER_METRIC.capExhausted,
      'gauge',
      "1 when the peer's bytes used reached its enforced data cap (its traffic is dropped, or throttled), else 0; absent when the peer has no cap",
    ),
    capThrottled: new Family(
      PEER_METRIC.capThrottled,
      'gauge',
      '1 when the peer used up a data cap that throttles (afterCap throttle): the kernel slows it to the throttle rate now, else 0; absent when the peer has no cap',
    ),
    capPreviousPeriod: new Family(
      PEER_METRIC.capPreviousPeriod,
      'gauge',
      "Bytes the peer's last billing-period reset closed with; absent when its cap has no period or none has reset yet",
    ),
    suspended: new Family(
      PEER_METRIC.suspended,
      'gauge',
      '1 when the peer is suspended (no tunnelled packet passes either way), else 0',
    ),
    expiresAt: new Family(
      PEER_METRIC.expiresAt,
      'gauge',
      'UNIX time the peer expires, in seconds (issue 31): from then on the kernel passes no packet of it; absent when it has no expiry',
    ),
    ipv6: new Family(
      PEER_METRIC.ipv6,
      'gauge',
      "Always 1; the ipv6 label is a dual-stack peer's IPv6 address (its first /128 allowed IP), which its speed limit and data cap cover too; absent for a peer without one",
    ),
  };
  const counts: Record<StatusLabel, number> = { alive: 0, dead: 0, never: 0 };
  let limited = 0;
  let limitsLost = 0;
  let capped = 0;
  let capsLost = 0;
  let exhausted = 0;
  let throttledPeers = 0;
  let suspendedPeers = 0;
  let expiredPeers = 0;

  // 50,000 peers take most of a second to render: let other requests in between (DESIGN §5).
  const families = Object.values(f);
  await inSlices(
    snapshot.device.peers,
    (peer) => {
      const { ip, ip6, status, limit, cap, suspended, expiresAt, expired } = viewOf(peer, snapshot);
      const statusLabel: StatusLabel =
        status === ALIVE ? 'alive' : status === DEAD ? 'dead' : 'never';
      counts[statusLabel] += 1;
      // A cap the kernel lost drops nothing: it is not exhausted, whatever it counted.
      const isExhausted = cap !== null && cap.enforced && cap.usedBytes >= cap.quotaBytes;
      if (limit !== null) {
        limited += 1;
        if (limit.download === null || limit.upload === null) limitsLost += 1;
      }
      if (cap !== null) {
        capped += 1;
        if (!cap.enforced) capsLost += 1;
      }
      const isThrottled = cap?.throttled === true;
      if (isExhausted) exhausted += 1;
      if (isThrottled) throttledPeers += 1;
      if (suspended) suspendedPeers += 1;
      if (expired) expiredPeers += 1;
      if (!perPeer) return;

      // A peer without an IPv4 /32 (added by other tools) has ip="" rather than no label, so
      // every series of a family has the same label names.
      const peerLabels = `public_key="${escapeLabelValue(peer.publicKey)}",ip="${ip ?? ''}"`;
      const labels = `{${peerLabels}}`;
      if (peer.lastHandshake !== null) {
        f.lastHandshake.add(labels, Math.floor(peer.lastHandshake.getTime() / 1000));
      }
      f.status.add(`{${peerLabels},status="${statusLabel}"}`, 1);
      if (ip6 !== null) f.ipv6.add(`{${peerLabels},ipv6="${ip6}"}`, 1);
      f.receive.add(labels, peer.rxBytes);
      f.transmit.add(labels, peer.txBytes);
      f.suspended.add(labels, suspended ? 1 : 0);
      if (expiresAt !== null) f.expiresAt.add(labels, Math.floor(expiresAt / 1000));
      if (limit !== null) renderSpeedLimit(f.speedLimit, f.speedLimitEnforced, peerLabels, limit);
      if (cap !== null) {
        f.capQuota.add(labels, cap.quotaBytes);
        f.capUsed.add(labels, cap.usedBytes);
        f.capEnforced.add(labels, cap.enforced ? 1 : 0);
        f.capExhausted.add(labels, isExhausted ? 1 : 0);
        const previous = cap.plan?.previousUsedBytes;
        if (previous != null) f.capPreviousPeriod.add(labels, previous);
        f.capThrottled.add(labels, isThrottled ? 1 : 0);
      }
    },
    {
      pause,
      between: () => {
        for (const family of families) family.flush();
      },
    },
  );

  const byStatus = new Family(
    AGGREGATE_METRIC.byStatus,
    'gauge',
    'Peers of the interface by status: alive, dead, never (no handshake yet)',
  );
  for (const label of STATUS_LABELS) byStatus.add(labelSet([['status', label]]), counts[label]);
  const aggregate = (name: string, help: string, value: number): Family => {
    const family = new Family(name, 'gauge', help);
    family.add('', value);
    return family;
  };
  const aggregates = [
    byStatus,
    aggregate(AGGREGATE_METRIC.limited, 'Peers with a speed limit', limited),
    aggregate(
      AGGREGATE_METRIC.limitsLost,
      'Peers whose speed limit the kernel lost in one direction (the next write repairs it)',
      limitsLost,
    ),
    aggregate(AGGREGATE_METRIC.capped, 'Peers with a data cap', capped),
    aggregate(
      AGGREGATE_METRIC.capsLost,
      'Peers whose data cap the kernel no longer enforces (the next write repairs it)',
      capsLost,
    ),
    aggregate(
      AGGREGATE_METRIC.exhausted,
      'Peers whose bytes used reached their enforced data cap',
      exhausted,
    ),
    aggregate(
      AGGREGATE_METRIC.throttled,
      'Peers slowed to their throttle rate after using up their data cap',
      throttledPeers,
    ),
    aggregate(AGGREGATE_METRIC.suspended, 'Peers suspended', suspendedPeers),
    aggregate(
      AGGREGATE_METRIC.expired,
      'Peers whose expiry passed: the kernel passes no packet of them (issue 31)',
      expiredPeers,
    ),
  ];

  const rendered = perPeer ? [...families, ...aggregates] : aggregates;
  // Chunks, not one buffer: joining 30 MB (50,000 peers) would block the event loop once more.
  return rendered.flatMap((family) => family.render());
}
