/**
 * When each data cap ran out (the list's `data_cap.exhausted_at`, issue 19), as a port: the
 * service hands every fresh shared read (PeerSnapshot) to it and lists what it answers; the
 * events room implements it from what it learns of exhaustions (src/events/exhaustion.ts: the
 * kernel's notice when it comes first, else the first read that found the cap used up), and
 * learns of the daemon's own resets from the change sink. peers never imports events.
 *
 * Contract: `read` answers, for the caps of that read that are used up, the time the daemon
 * learned of their exhaustion in this period, ms since the epoch; a cap with room, or whose
 * exhaustion has no known time (found used up by the first read of this run, with no time kept
 * from before), is absent. The same read twice answers the same.
 */
import type { KernelDataCap } from '../kernel/types';
import type { SavedState } from '../state';
import { tunnelAddressOfCidrs } from './restore-plan';

/** One fresh kernel read of the caps, as the shared snapshot took it. */
export interface CapsRead {
  /** The kernel's caps by tunnel address (not the last-seen caps of lost ones). */
  caps: ReadonlyMap<string, KernelDataCap>;
  /** Tunnel address → the public key of the peer that owns the cap there. */
  owners: ReadonlyMap<string, string>;
  /** When the kernel read started and completed, ms since the epoch. */
  startedAt: number;
  takenAt: number;
}

export interface ExhaustionTimes {
  /** Tunnel address → when the cap ran out, for the read's used-up caps with a known time. */
  read(read: CapsRead): ReadonlyMap<string, number>;
}

/** An exhaustion time kept from an earlier run (a state dir's journal). */
export interface KnownExhaustion {
  address: string;
  publicKey: string;
  quotaBytes: number;
  /** Ms since the epoch. */
  at: number;
}

/** The exhaustion times a state dir's journal holds, by the tunnel address of their peer. */
export function savedExhaustions(state: Readonly<SavedState>): KnownExhaustion[] {
  const known: KnownExhaustion[] = [];
  for (const [publicKey, saved] of state.exhausted ?? []) {
    const peer = state.peers.get(publicKey);
    const address = peer === undefined ? null : tunnelAddressOfCidrs(peer.allowedIps);
    if (address !== null) known.push({ address, publicKey, ...saved });
  }
  return known;
}
