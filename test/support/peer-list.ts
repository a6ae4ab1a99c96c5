/**
 * The reference list (test oracle, issue 17): GET /api/peers as the daemon answered it before
 * the list body was written by hand (issue 8), plain objects through JSON.stringify, derived
 * here from a snapshot without src/peers/view.ts, so that the list body, the view and this
 * agree only if each is right. No production code uses it.
 */
import {
  formatPeriodStart,
  livenessOf,
  nextReset,
  type CapPlan,
  type FilterStatus,
  type KernelDataCap,
  type PeerSnapshot,
  type PeerStatus,
} from '../../src/peers';

/** One peer of the list, as the domain would hand it over. */
export interface PeerEntry {
  publicKey: string;
  /** The peer's tunnel address: its first IPv4 /32 allowed IP; null when it has none. */
  ipAddress: string | null;
  /** Its IPv6 tunnel address: its first IPv6 /128 allowed IP; null when it has none. */
  ipv6Address: string | null;
  lastHandshake: string | null;
  minutesSinceHandshake: number | null;
  status: PeerStatus;
  /** CIDR texts, as the kernel holds them. */
  allowedIps: string[];
  endpoint: string | null;
  rxBytes: number;
  txBytes: number;
  /** Seconds, 0 when off. */
  persistentKeepalive: number;
  /** The kernel holds a non-zero preshared key for it (issue 31). */
  presharedKey: boolean;
  /** The rate when a limit holds in at least one direction (download's when both), else null. */
  speedLimitBytesPerSecond: number | null;
  /** Where the limit holds: both directions, one only (the other was lost), or none. */
  speedLimitHolds: 'both' | 'download' | 'upload' | null;
  dataCap: KernelDataCap | null;
  /** The kernel's suspension of the address is this peer's own. */
  suspended: boolean;
  /** When its cap ran out (the snapshot's `exhausted`), ISO 8601 UTC; null without. */
  exhaustedAt: string | null;
  /** With a cap: when its figures were read (`capsReadAt`, else `takenAt`), ISO 8601 UTC. */
  capReadAt: string | null;
  /** Its name (issue 31); null without. */
  name: string | null;
  /** Its expiry, ISO 8601 UTC (issue 31); null without. */
  expiresAt: string | null;
  /** The kernel ended its expiry (the snapshot's `expired`). */
  expired: boolean;
}

/** The entries of a snapshot, statuses at the moment of its read (DESIGN §5). */
export function entriesOf(snapshot: PeerSnapshot, filter: FilterStatus | null): PeerEntry[] {
  const entries: PeerEntry[] = [];
  for (const peer of snapshot.device.peers) {
    const liveness = livenessOf(peer.lastHandshake, snapshot.takenAt);
    if (filter !== null && liveness.status !== filter) continue;
    const host = peer.allowedIps.filter((p) => p.family === 4 && p.cidr === 32)[0];
    const ipAddress = host === undefined ? null : host.address;
    const host6 = peer.allowedIps.filter((p) => p.family === 6 && p.cidr === 128)[0];
    const limit = ipAddress === null ? undefined : snapshot.limits.get(ipAddress);
    const download = limit?.download ?? null;
    const upload = limit?.upload ?? null;
    const cap = ipAddress === null ? undefined : snapshot.caps.get(ipAddress);
    entries.push({
      publicKey: peer.publicKey,
      ipAddress,
      ipv6Address: host6 === undefined ? null : host6.address,
      lastHandshake: liveness.lastHandshake,
      minutesSinceHandshake: liveness.minutesSinceHandshake,
      status: liveness.status,
      allowedIps: peer.allowedIps.map((p) => `${p.address}/${p.cidr}`),
      endpoint: peer.endpoint,
      rxBytes: peer.rxBytes,
      txBytes: peer.txBytes,
      persistentKeepalive: peer.persistentKeepalive,
      presharedKey: peer.presharedKey === true,
      speedLimitBytesPerSecond: download ?? upload,
      speedLimitHolds:
        download !== null && upload !== null
          ? 'both'
          : download !== null
            ? 'download'
            : upload !== null
              ? 'upload'
              : null,
      dataCap:
        cap === undefined
          ? null
          : {
              quotaBytes: cap.quotaBytes,
              usedBytes: cap.usedBytes,
              enforced: cap.enforced,
              ...(cap.plan ? { plan: cap.plan } : {}),
              ...(cap.throttleBytesPerSecond == null
                ? {}
                : {
                    throttleBytesPerSecond: cap.throttleBytesPerSecond,
                    throttled: cap.throttled === true,
                  }),
            },
      suspended: ipAddress !== null && snapshot.suspended?.get(ipAddress) === peer.publicKey,
      exhaustedAt: exhaustedAtOf(snapshot, ipAddress),
      capReadAt:
        cap === undefined ? null : new Date(snapshot.capsReadAt ?? snapshot.takenAt).toISOString(),
      name: snapshot.names?.get(peer.publicKey) ?? null,
      expiresAt: expiresAtOf(snapshot.expiries?.get(peer.publicKey)),
      expired: snapshot.expired?.has(peer.publicKey) ?? false,
    });
  }
  return entries;
}

function exhaustedAtOf(snapshot: PeerSnapshot, ipAddress: string | null): string | null {
  const at = ipAddress === null ? undefined : snapshot.exhausted?.get(ipAddress);
  return at === undefined ? null : new Date(at).toISOString();
}

/** The entries of the service's shared read (what PeerService.listPeers answered). */
export async function listPeers(
  service: { snapshot(): Promise<PeerSnapshot> },
  filter: FilterStatus | null,
): Promise<PeerEntry[]> {
  return entriesOf(await service.snapshot(), filter);
}

/** One peer of the list body, fields in the body's order. */
export function toPeerJson(entry: PeerEntry) {
  return {
    public_key: entry.publicKey,
    ip_address: entry.ipAddress,
    ipv6_address: entry.ipv6Address,
    last_handshake: entry.lastHandshake,
    minutes_since_handshake: entry.minutesSinceHandshake,
    status: entry.status,
    allowed_ips: entry.allowedIps,
    endpoint: entry.endpoint,
    rx_bytes: entry.rxBytes,
    tx_bytes: entry.txBytes,
    persistent_keepalive_seconds: entry.persistentKeepalive,
    preshared_key: entry.presharedKey,
    speed_limit_bytes_per_second: entry.speedLimitBytesPerSecond,
    speed_limit_holds: entry.speedLimitHolds,
    data_cap:
      entry.dataCap === null
        ? null
        : {
            quota_bytes: entry.dataCap.quotaBytes,
            used_bytes: entry.dataCap.usedBytes,
            enforced: entry.dataCap.enforced,
            ...planOf(entry.dataCap.plan ?? null),
            after_cap: entry.dataCap.throttleBytesPerSecond == null ? 'block' : 'throttle',
            throttle_bytes_per_second: entry.dataCap.throttleBytesPerSecond ?? null,
            exhausted_at: entry.exhaustedAt,
            throttled: entry.dataCap.throttled === true,
            read_at: entry.capReadAt,
          },
    suspended: entry.suspended,
    name: entry.name,
    expires_at: entry.expiresAt,
    expired: entry.expired,
  };
}

function expiresAtOf(at: number | undefined): string | null {
  return at === undefined ? null : new Date(at).toISOString();
}

/** The whole list body the reference gives, bytes. */
export function referenceBody(entries: readonly PeerEntry[], filter: FilterStatus | null): Buffer {
  return Buffer.from(
    JSON.stringify({
      success: true,
      peers: entries.map(toPeerJson),
      total_count: entries.length,
      filter,
    }),
  );
}

/** The list's plan fields, written out here the long way (the body builder is checked against it). */
function planOf(plan: CapPlan | null) {
  if (plan === null) {
    return { period: null, period_start: null, next_reset: null, previous_period_used_bytes: null };
  }
  return {
    period: plan.period,
    period_start: formatPeriodStart(plan.periodStart),
    next_reset: new Date(nextReset(plan.periodStart, plan.period, plan.periodFrom)).toISOString(),
    previous_period_used_bytes: plan.previousUsedBytes,
  };
}

/**
 * The reference of a partial response (issue 29, `?fields=`): the whole body above, each peer
 * projected onto the names given (Google APIs' `fields`: only the listed fields, in the body's
 * order, each once; `data_cap.<field>` keeps that field of `data_cap`, and a peer without a
 * cap keeps `"data_cap": null`), the envelope whole. Written from the oracle's objects, not
 * from the daemon's field set.
 */
export function referencePartialBody(
  entries: readonly PeerEntry[],
  filter: FilterStatus | null,
  names: readonly string[],
): Buffer {
  const top = new Set(names.filter((name) => !name.includes('.')));
  const within = new Set(
    names.filter((name) => name.startsWith('data_cap.')).map((name) => name.slice(9)),
  );
  const peers = entries.map((entry) => {
    const full = toPeerJson(entry) as Record<string, unknown>;
    const out: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(full)) {
      if (top.has(key)) out[key] = value;
      else if (key === 'data_cap' && within.size > 0) {
        out[key] =
          value === null
            ? null
            : Object.fromEntries(
                Object.entries(value as Record<string, unknown>).filter(([k]) => within.has(k)),
              );
      }
    }
    return out;
  });
  return Buffer.from(JSON.stringify({ success: true, peers, total_count: entries.length, filter }));
}

/** ISO 8601 in UTC with milliseconds, as Date#toISOString writes it. */
const ISO_UTC = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

/**
 * A listed `data_cap` without its `read_at` (issue 29: when its figures were read), for a test
 * about the other fields; `read_at` must be an ISO 8601 UTC instant (tests of the caps' cadence
 * check its value). Anything else passes through as it is.
 */
export function withoutReadAt<T>(cap: T): T {
  if (cap === null || typeof cap !== 'object') return cap;
  const { read_at: readAt, ...rest } = cap as Record<string, unknown>;
  if (typeof readAt !== 'string' || !ISO_UTC.test(readAt)) {
    throw new Error(`data_cap.read_at is not an ISO 8601 UTC instant: ${String(readAt)}`);
  }
  return rest as T;
}

/** Listed peers, each `data_cap` through `withoutReadAt`. */
export function peersWithoutReadAt(peers: unknown): Record<string, unknown>[] {
  return (peers as Record<string, unknown>[]).map((peer) => ({
    ...peer,
    data_cap: withoutReadAt(peer['data_cap']),
  }));
}
