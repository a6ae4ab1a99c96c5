/** Liveness of a peer from the age of its last handshake (SPEC §3, DESIGN §3). */

export const ALIVE = 'ALIVE';
export const DEAD = 'DEAD';
export const NO_HANDSHAKE = 'No handshake yet';

export type FilterStatus = typeof ALIVE | typeof DEAD;
export type PeerStatus = FilterStatus | typeof NO_HANDSHAKE;

/** A handshake at most this old is ALIVE; older is DEAD (SPEC §8). */
export const ALIVE_THRESHOLD_MS = 150_000;

export interface Liveness {
  status: PeerStatus;
  /** ISO 8601 UTC, null without a handshake. */
  lastHandshake: string | null;
  /** Whole minutes since the handshake, rounded down; null without a handshake. */
  minutesSinceHandshake: number | null;
}

/**
 * `now` is milliseconds since the epoch. A handshake stamped in the future (clock step) counts
 * as age 0.
 */
export function livenessOf(lastHandshake: Date | null, now: number): Liveness {
  const { status, minutesSinceHandshake } = statusAt(lastHandshake, now);
  return {
    status,
    lastHandshake: lastHandshake === null ? null : lastHandshake.toISOString(),
    minutesSinceHandshake,
  };
}

/** What of livenessOf changes with `now`, without formatting the handshake's time. */
export function statusAt(
  lastHandshake: Date | null,
  now: number,
): Pick<Liveness, 'status' | 'minutesSinceHandshake'> {
  if (lastHandshake === null) return { status: NO_HANDSHAKE, minutesSinceHandshake: null };
  const age = Math.max(0, now - lastHandshake.getTime());
  return {
    status: age <= ALIVE_THRESHOLD_MS ? ALIVE : DEAD,
    minutesSinceHandshake: Math.floor(age / 60_000),
  };
}

/**
 * The first instant, ms since the epoch, after `now` at which `statusAt(lastHandshake, ·)`
 * answers other than at `now` (its minute or its status moves), as time runs forward; Infinity
 * without a handshake. A body built at `now` shows the same status and minutes at any instant
 * from `now` up to this one, exclusive (list-body.ts answers such a read with that body again).
 */
export function statusChangesAt(lastHandshake: Date | null, now: number): number {
  if (lastHandshake === null) return Infinity;
  const at = lastHandshake.getTime();
  const age = Math.max(0, now - at);
  const nextMinute = at + (Math.floor(age / 60_000) + 1) * 60_000;
  return age <= ALIVE_THRESHOLD_MS ? Math.min(nextMinute, at + ALIVE_THRESHOLD_MS + 1) : nextMinute;
}
