/**
 * One peer as the list and the metrics show it (issue 17): the kernel's peer, and what a
 * snapshot adds to it (its tunnel address, its status and minutes at the snapshot's time, its
 * speed limit and its data cap). `viewOf` is the one place that derives these; the list body
 * (src/http/list-body.ts) and the metrics (src/http/peer-metrics.ts) write what it gives, and
 * `stillCurrent` says when a peer's list fragment built for an earlier view can be reused.
 *
 * A new list field is a field of the kernel's types (and its decoder) or a line here, then the
 * body and the schema.
 */
import type { CapPlan, KernelDataCap, LimitState, WireGuardPeer } from '../kernel/types';
import { formatPeriodStart, nextReset } from './periods';
import type { PeerSnapshot } from './snapshot';
import { statusAt, type PeerStatus } from './status';

export interface PeerView {
  /** The kernel's own fields (key, handshake time, endpoint, counters, allowed IPs). */
  readonly peer: WireGuardPeer;
  /** The tunnel address: the first IPv4 /32 allowed IP; null when the peer has none. */
  readonly ip: string | null;
  /** The IPv6 tunnel address: the first IPv6 /128 allowed IP; null when the peer has none. */
  readonly ip6: string | null;
  readonly status: PeerStatus;
  /** Whole minutes since the handshake at the snapshot's time; null without a handshake. */
  readonly minutesSinceHandshake: number | null;
  /** The speed limit per direction as the kernel holds it; null without one. */
  readonly limit: LimitState | null;
  /** The data cap (a cap the kernel lost is listed as last seen, `enforced: false`). */
  readonly cap: KernelDataCap | null;
  /** Suspended in the kernel, by a suspension this very peer owns (issue 19). */
  readonly suspended: boolean;
  /** When its used-up cap ran out in this period, ms since the epoch; null: room, or unknown. */
  readonly exhaustedAt: number | null;
  /** When the read its cap's figures come from completed, ms since the epoch; null: no cap. */
  readonly capReadAt: number | null;
  /** Its name (issue 31); null: none. */
  readonly name: string | null;
  /** When it expires, ms since the epoch (issue 31); null: never. */
  readonly expiresAt: number | null;
  /** The kernel no longer lets it pass: its expiry has passed (issue 31). */
  readonly expired: boolean;
}

/** Where a limit holds: both directions, one only (the other was lost), or none. */
export type LimitHolds = 'both' | 'download' | 'upload' | null;

/** The first IPv4 /32 allowed IP: the address limits, caps and the list key on. */
export function tunnelAddressOf(peer: WireGuardPeer): string | null {
  const prefix = peer.allowedIps.find((p) => p.family === 4 && p.cidr === 32);
  return prefix ? prefix.address : null;
}

/** The first IPv6 /128 allowed IP: a dual-stack peer's IPv6 address (issue 18). */
export function tunnelAddress6Of(peer: WireGuardPeer): string | null {
  const prefix = peer.allowedIps.find((p) => p.family === 6 && p.cidr === 128);
  return prefix ? prefix.address : null;
}

/**
 * The peer at the snapshot's time. `ip` may be given when already known for this very peer
 * object (it depends on the peer alone). Pure: the same peer and snapshot give an equal view.
 */
export function viewOf(
  peer: WireGuardPeer,
  snapshot: PeerSnapshot,
  ip: string | null = tunnelAddressOf(peer),
): PeerView {
  const { status, minutesSinceHandshake } = statusAt(peer.lastHandshake, snapshot.takenAt);
  // No Map lookup on a device without limits or caps (the common large idle host).
  const limit = ip === null || snapshot.limits.size === 0 ? undefined : snapshot.limits.get(ip);
  const cap = ip === null || snapshot.caps.size === 0 ? undefined : snapshot.caps.get(ip);
  return {
    peer,
    ip,
    ip6: tunnelAddress6Of(peer),
    status,
    minutesSinceHandshake,
    limit: limit ?? null,
    cap: cap ?? null,
    suspended: suspendedAt(peer, ip, snapshot),
    exhaustedAt: exhaustedAtIn(ip, snapshot),
    capReadAt: cap === undefined ? null : capsReadAtOf(snapshot),
    name: nameIn(peer, snapshot),
    expiresAt: snapshot.expiries?.get(peer.publicKey) ?? null,
    expired: snapshot.expired?.has(peer.publicKey) ?? false,
  };
}

/** The peer's name in the snapshot (issue 31), or null. */
function nameIn(peer: WireGuardPeer, snapshot: PeerSnapshot): string | null {
  const names = snapshot.names;
  if (names === undefined || names.size === 0) return null;
  return names.get(peer.publicKey) ?? null;
}

/** When the snapshot's caps were read (PeerSnapshot.capsReadAt), ms since the epoch. */
export function capsReadAtOf(snapshot: PeerSnapshot): number {
  return snapshot.capsReadAt ?? snapshot.takenAt;
}

/** When the snapshot says the cap at `ip` ran out (./exhaustion-times.ts), or null. */
function exhaustedAtIn(ip: string | null, snapshot: PeerSnapshot): number | null {
  const exhausted = snapshot.exhausted;
  if (ip === null || exhausted === undefined || exhausted.size === 0) return null;
  return exhausted.get(ip) ?? null;
}

/** Whether the snapshot shows the peer suspended: its address's suspension is its own. */
function suspendedAt(peer: WireGuardPeer, ip: string | null, snapshot: PeerSnapshot): boolean {
  const suspended = snapshot.suspended;
  if (ip === null || suspended === undefined || suspended.size === 0) return false;
  return suspended.get(ip) === peer.publicKey;
}

/**
 * Whether `view`, made for an earlier snapshot of this very peer object, is what viewOf would
 * give at `snapshot`: what time and the other facilities change (the peer's own fields are the
 * same object's). It allocates no view, so an idle peer costs a comparison. Each comparison
 * here is held by a test of the list body's fragment reuse (test/unit/http/list-body.test.ts).
 */
export function stillCurrent(view: PeerView, snapshot: PeerSnapshot): boolean {
  return (
    currentApartFromReadAt(view, snapshot) &&
    (view.cap === null ? null : capsReadAtOf(snapshot)) === view.capReadAt
  );
}

/**
 * `stillCurrent` but for `capReadAt` (the instant the caps were read, issue 29): one instant for
 * every cap of a snapshot, which moves with each read of the caps while what they show mostly
 * does not. The list body writes it into each capped peer's bytes itself (list-body.ts), so a
 * peer's fragment outlives a read of the caps that changed nothing else of it. Whether the peer
 * has a cap at all is still compared (through the cap's fields).
 */
export function currentApartFromReadAt(view: PeerView, snapshot: PeerSnapshot): boolean {
  const { status, minutesSinceHandshake } = statusAt(view.peer.lastHandshake, snapshot.takenAt);
  const { ip } = view;
  const limit = ip === null || snapshot.limits.size === 0 ? undefined : snapshot.limits.get(ip);
  const cap = ip === null || snapshot.caps.size === 0 ? undefined : snapshot.caps.get(ip);
  return (
    minutesSinceHandshake === view.minutesSinceHandshake &&
    status === view.status &&
    (limit?.download ?? null) === (view.limit?.download ?? null) &&
    (limit?.upload ?? null) === (view.limit?.upload ?? null) &&
    (cap?.quotaBytes ?? -1) === (view.cap?.quotaBytes ?? -1) &&
    (cap?.usedBytes ?? -1) === (view.cap?.usedBytes ?? -1) &&
    (cap?.enforced ?? null) === (view.cap?.enforced ?? null) &&
    samePlan(cap?.plan ?? null, view.cap?.plan ?? null) &&
    (cap?.throttleBytesPerSecond ?? null) === (view.cap?.throttleBytesPerSecond ?? null) &&
    (cap?.throttled ?? false) === (view.cap?.throttled ?? false) &&
    suspendedAt(view.peer, ip, snapshot) === view.suspended &&
    exhaustedAtIn(ip, snapshot) === view.exhaustedAt &&
    nameIn(view.peer, snapshot) === view.name &&
    (snapshot.expiries?.get(view.peer.publicKey) ?? null) === view.expiresAt &&
    (snapshot.expired?.has(view.peer.publicKey) ?? false) === view.expired
  );
}

/** How a limit is listed (README "Product decisions"): its rate and where it holds. */
export function limitOf(state: LimitState | null | undefined): {
  rate: number | null;
  holds: LimitHolds;
} {
  const download = state?.download ?? null;
  const upload = state?.upload ?? null;
  if (download !== null && upload !== null) return { rate: download, holds: 'both' };
  if (download !== null) return { rate: download, holds: 'download' };
  if (upload !== null) return { rate: upload, holds: 'upload' };
  return { rate: null, holds: null };
}

/**
 * Peers visited between two turns of the event loop: ~4 ms of list serialization on the host,
 * 40-200 ms in an emulated VM ten to fifty times slower; a yield costs microseconds.
 */
export const PEERS_PER_SLICE = 1000;

const yieldToEventLoop = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

export interface SliceOptions {
  perSlice?: number;
  /** What runs between slices; a turn of the event loop (setImmediate) by default. */
  pause?: () => Promise<void>;
  /** Called before each pause (e.g. to flush what the slice wrote). */
  between?: () => void;
}

/**
 * Visits every item, pausing between slices, so a walk over 50,000 peers never blocks the
 * requests that arrive meanwhile (DESIGN §5): the one slicing of the list body and the metrics.
 */
export async function inSlices<T>(
  items: readonly T[],
  visit: (item: T) => void,
  options: SliceOptions = {},
): Promise<void> {
  const perSlice = options.perSlice ?? PEERS_PER_SLICE;
  const pause = options.pause ?? yieldToEventLoop;
  for (let start = 0; start < items.length; start += perSlice) {
    if (start > 0) {
      options.between?.();
      await pause();
    }
    const end = Math.min(items.length, start + perSlice);
    for (let i = start; i < end; i++) visit(items[i]!);
  }
}

/** Two billing periods alike, field by field (each read decodes new objects). */
export function samePlan(a: CapPlan | null, b: CapPlan | null): boolean {
  if (a === null || b === null) return a === b;
  return (
    a.period === b.period &&
    a.periodStart.at === b.periodStart.at &&
    a.periodStart.offsetMinutes === b.periodStart.offsetMinutes &&
    a.periodFrom === b.periodFrom &&
    a.previousUsedBytes === b.previousUsedBytes
  );
}

/** The list's plan fields of a cap (DESIGN §3): all null without a period. */
export function planFields(plan: CapPlan | null | undefined): {
  period: string | null;
  periodStart: string | null;
  nextReset: string | null;
  previousPeriodUsedBytes: number | null;
} {
  if (!plan)
    return { period: null, periodStart: null, nextReset: null, previousPeriodUsedBytes: null };
  return {
    period: plan.period,
    periodStart: formatPeriodStart(plan.periodStart),
    // The next reset the daemon owes: the first boundary after the current period began.
    nextReset: new Date(nextReset(plan.periodStart, plan.period, plan.periodFrom)).toISOString(),
    previousPeriodUsedBytes: plan.previousUsedBytes,
  };
}
