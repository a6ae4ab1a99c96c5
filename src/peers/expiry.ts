/**
 * Peer expiry (issue 31): from a peer's `expiresAt` on it passes no packet either way, enforced
 * by the kernel (src/kernel/expiry) whether or not the daemon runs.
 *
 * Contract. An expiry is given as ISO 8601 text with a UTC offset (`Z` or `±hh:mm`), in the
 * future, at most TIMEOUT_MAX_MS ahead (the kernel's bound on an element's timeout, about 584
 * years: no expiry the daemon takes ever needs renewing before it ends); null is none. The
 * daemon serves the instants from one immutable map (public key → ms since the epoch), replaced
 * whole at each change, as the names (./names.ts): set by create and PATCH .../expiry in the
 * same kernel step that writes the kernel's sets, loaded at start from the journal (with a state
 * directory) or else from the kernel's `expiring` set. Whether an expiry has passed is the
 * kernel's word: a read that finds the peer's element gone from `valid` shows it `expired`, and
 * tells it once as `peer.expired` (./service.ts); a change that lets an expired peer pass again
 * tells `peer.renewed`.
 */
import { TIMEOUT_MAX_MS } from '../kernel/expiry';
import type { WireGuardDevice } from '../kernel/types';
import type { ChangedPeer, EventLogger } from './contracts';
import { ValidationError, isFacilityAbsent } from './errors';
import type { PeerChangeSink } from './event-sink';
import { type KernelCalls, messageOf } from './kernel-calls';
import { tunnelAddressOf } from './view';
import { PerPeerMap } from './per-peer-map';

export { TIMEOUT_MAX_MS };

/** ISO 8601 date and time with seconds optional, fractions optional, and a UTC offset. */
export const EXPIRES_AT_PATTERN =
  '^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}(:\\d{2}(\\.\\d{1,9})?)?(Z|[+-]\\d{2}:\\d{2})$';
const EXPIRES_AT_RE = new RegExp(EXPIRES_AT_PATTERN);

function invalid(field: string, message: string): ValidationError {
  return new ValidationError(`Invalid request body: ${field} ${message}`, [
    { field: `/${field}`, message },
  ]);
}

/** Whether the date part names a real day (Date.parse rolls 2026-02-30 over to March). */
function realDay(text: string): boolean {
  const [year, month, day] = text.slice(0, 10).split('-').map(Number) as [number, number, number];
  const last = new Date(Date.UTC(year, month, 0)).getUTCDate();
  return month >= 1 && month <= 12 && day >= 1 && day <= last;
}

/**
 * The instant (ms since the epoch) of an expiry as given, null for null; throws ValidationError
 * (400 with `details` naming `field`) for anything but ISO 8601 text with an offset in the
 * future, within the kernel's bound.
 */
export function parseExpiresAt(value: unknown, now: number, field = 'expiresAt'): number | null {
  if (value === null) return null;
  if (typeof value !== 'string' || !EXPIRES_AT_RE.test(value) || !realDay(value)) {
    throw invalid(
      field,
      'must be an ISO 8601 date and time with a UTC offset (e.g. 2026-12-31T23:59:59Z or 2026-12-31T23:59:59+01:00), or null',
    );
  }
  const at = Date.parse(value);
  if (!Number.isFinite(at)) throw invalid(field, 'must be a valid date and time');
  if (at <= now) throw invalid(field, 'must be in the future');
  if (at - now > TIMEOUT_MAX_MS) {
    throw invalid(
      field,
      `must be at most ${TIMEOUT_MAX_MS} ms (about 584 years) ahead: the kernel's bound on a timeout`,
    );
  }
  return at;
}

/** The expiries now, by public key (./per-peer-map.ts). */
export class PeerExpiries extends PerPeerMap<number> {
  /** The journal's peers' expiries. */
  static fromJournal(peers: ReadonlyMap<string, { expiresAt?: number }>): Array<[string, number]> {
    const kept: Array<[string, number]> = [];
    for (const [key, peer] of peers) {
      if (peer.expiresAt !== undefined) kept.push([key, peer.expiresAt]);
    }
    return kept;
  }
}

/** What a read knows of expiries: the instants, and the peers the kernel no longer lets pass. */
export interface ExpiryRead {
  /** Public key → expiry (ms since the epoch). */
  expiries: ReadonlyMap<string, number>;
  /** Public keys of the peers whose expiry the kernel has ended. */
  expired: ReadonlySet<string>;
}

const NO_EXPIRY: ExpiryRead = { expiries: new Map(), expired: new Set() };

/**
 * The service's side of expiry: the instants it serves (PeerExpiries), the kernel change of a
 * set/renew/clear, and the read that learns which elements of `valid` ended (one dump of that set,
 * only while some peer has an expiry), telling each newly expired peer once as `peer.expired`.
 */
export class ExpiryTracker {
  readonly instants = new PeerExpiries();
  /** Public keys the last read found expired (what `peer.expired` was told for). */
  private expired: ReadonlySet<string> = new Set();

  private readonly o: {
    calls: KernelCalls;
    log: EventLogger;
    now: () => number;
    events?: PeerChangeSink;
  };

  constructor(calls: KernelCalls, log: EventLogger, now: () => number, events?: PeerChangeSink) {
    this.o = { calls, log, now, events };
  }

  /**
   * Loads the instants at start: the journal's peers' (with a state directory), else what the
   * kernel's `expiring` set holds by owner; a kernel that cannot answer leaves none (a warn line).
   */
  async load(journal: { state: { peers: ReadonlyMap<string, { expiresAt?: number }> } } | null) {
    if (journal !== null) {
      this.instants.load(PeerExpiries.fromJournal(journal.state.peers));
      return;
    }
    const { calls } = this.o;
    try {
      const held = await calls.call('expiry', () => calls.kernel.expiry.listExpiries(calls.ifname));
      this.instants.load(held.map((e) => [e.publicKey, e.expiresAt] as const));
    } catch (error) {
      this.o.log.warn(
        { event: 'expiries_unread', interface: calls.ifname, error: messageOf(error) },
        `the peers' expiries could not be read from the kernel: ${messageOf(error)}`,
      );
    }
  }

  /**
   * The kernel change of PATCH .../expiry (in the pipeline's kernel step): the peer's elements
   * written, the instant served, and `peer.renewed` when a peer that had expired passes again.
   */
  async change(key: string, expiresAt: number | null): Promise<ChangedPeer> {
    const { calls } = this.o;
    const peer = await calls.refFor(key, 'expiry');
    await calls.call('expiry', () => calls.kernel.expiry.setExpiry(calls.ifname, peer, expiresAt));
    const before = this.instants.get(key);
    const now = this.o.now();
    const wasExpired = this.expired.has(key) || (before !== null && before <= now);
    this.instants.set(key, expiresAt);
    const at = expiresAt === null ? null : new Date(expiresAt).toISOString();
    this.o.log.info(
      { event: 'peer_expiry_set', interface: calls.ifname, public_key: key, expires_at: at },
      expiresAt === null ? 'peer expiry cleared' : `peer expires at ${at}`,
    );
    if (wasExpired) {
      const rest = new Set(this.expired);
      rest.delete(key);
      this.expired = rest;
      this.o.events?.publish({
        type: 'peer.renewed',
        publicKey: key,
        ipAddress: peer.address,
        details: { expires_at: at },
      });
    }
    return { publicKey: key, ip: peer.address };
  }

  /** A created peer's expiry, once the kernel has it. */
  created(key: string, expiresAt: number | null): void {
    if (expiresAt !== null) this.instants.set(key, expiresAt);
  }

  /** A deleted peer's expiry goes with it (the kernel's elements go in the delete's clean-up). */
  forget(key: string): void {
    this.instants.set(key, null);
  }

  /**
   * At a shared read: which peers the kernel no longer lets pass (their address not in `valid`;
   * without nf_tables, those whose instant has passed), and `peer.expired` for each one newly so.
   */
  async read(device: WireGuardDevice, takenAt: number): Promise<ExpiryRead> {
    const expiries = this.instants.current;
    if (expiries.size === 0) return NO_EXPIRY;
    const { calls } = this.o;
    let valid: Set<string> | null = null;
    try {
      // null: no valid set (flushed behind the daemon's back); the instants decide then.
      valid = await calls.call('expiry', () => calls.kernel.expiry.listValid(calls.ifname));
    } catch (error) {
      if (!isFacilityAbsent(error)) throw error;
    }
    const expired = new Set<string>();
    const addresses = new Map<string, string | null>();
    for (const peer of device.peers) {
      const at = expiries.get(peer.publicKey);
      if (at === undefined) continue;
      const ip = tunnelAddressOf(peer);
      addresses.set(peer.publicKey, ip);
      const ended = valid === null || ip === null ? at <= takenAt : !valid.has(ip);
      if (ended) expired.add(peer.publicKey);
    }
    const before = this.expired;
    this.expired = expired;
    for (const key of expired) {
      if (before.has(key)) continue;
      const ip = addresses.get(key) ?? null;
      const at = new Date(expiries.get(key)!).toISOString();
      this.o.log.info(
        { event: 'peer_expired', interface: calls.ifname, public_key: key, expires_at: at },
        'peer expired',
      );
      this.o.events?.publish({
        type: 'peer.expired',
        publicKey: key,
        ipAddress: ip,
        details: { origin: 'kernel', expires_at: at },
      });
    }
    return { expiries, expired };
  }
}
