/**
 * What a start with a state directory does, decided from one read of the kernel and the journal
 * (no I/O here: `planRestore` is a pure function, tested with literal inputs).
 *
 * The rules (issue 16; DESIGN §1):
 * - `first`: the journal has never recorded a boot and holds no peer: the daemon adopts what the
 *   kernel has, silently (an upgrade from a daemon without a state dir).
 * - `reboot`: the journal was written in another boot (boot_id differs), or the daemon has just
 *   created the interface, or the interface was recreated (another ifindex) and is empty: the
 *   kernel lost everything, so everything saved is put back: peers with their allowed IPs, limits,
 *   and caps with the bytes they had counted. What the kernel already has again (an operator's
 *   own config) is kept as the kernel has it and adopted.
 * - `restart`: same boot, same interface: an ordinary daemon restart. The kernel is the truth: a
 *   saved peer the kernel no longer has was deleted behind the daemon's back and stays deleted; a
 *   peer the kernel has and the journal does not was added behind its back and is adopted; limits
 *   and caps are taken as the kernel has them. Each difference is a warning.
 * In every mode a create whose intent was saved but whose commit was not never answered: its
 * private key went nowhere, so the peer is unusable; it is removed from the kernel if there, and
 * never restored. Afterwards the journal is exactly the resulting state, with the current boot.
 */
import type { LimitState, KernelDataCap, WireGuardPeer } from '../kernel/types';
import { capToKeep } from './cap-plan';
import type { SavedCap, SavedPeer, SavedState } from '../state';

export type RestoreMode = 'first' | 'reboot' | 'restart';

/** The kernel as read once at start. */
export interface KernelView {
  bootId: string;
  ifindex: number;
  /** The daemon created the interface during this start (it is empty). */
  created: boolean;
  peers: readonly Pick<WireGuardPeer, 'publicKey' | 'allowedIps'>[];
  /** By tunnel address. */
  limits: ReadonlyMap<string, LimitState>;
  /** By tunnel address. */
  caps: ReadonlyMap<string, KernelDataCap>;
  /** Suspended tunnel address → owner's public key; absent: none. */
  suspended?: ReadonlyMap<string, string | null>;
}

export interface RestoreWarning {
  event:
    | 'peer_deleted_behind_back'
    | 'peer_adopted'
    | 'create_never_answered'
    | 'limit_changed_behind_back'
    | 'cap_changed_behind_back';
  publicKey: string;
  message: string;
}

export interface RestorePlan {
  mode: RestoreMode;
  /** Peers to add to the kernel, whole. */
  addPeers: SavedPeer[];
  /** Public keys to remove from the kernel (creates that were never answered). */
  removePeers: string[];
  /**
   * Limits to set: peer and rate (the peer is in `addPeers` or already in the kernel); a
   * dual-stack peer's limit also names its IPv6 address (issue 18).
   */
  limits: { publicKey: string; address: string; address6?: string; bytesPerSecond: number }[];
  /** Caps to create with the bytes already counted; likewise with the IPv6 address. */
  caps: { publicKey: string; address: string; address6?: string; cap: SavedCap }[];
  /**
   * Suspensions to put back (a reboot): the peer is in `addPeers` or already in the kernel;
   * likewise with the IPv6 address.
   */
  suspensions: { publicKey: string; address: string; address6?: string }[];
  /** The state the journal holds once the plan is carried out (boot not included). */
  next: Map<string, SavedPeer>;
  warnings: RestoreWarning[];
}

/** The first IPv4 /32 of a list of CIDR texts: the address limits and caps key on. */
export function tunnelAddressOfCidrs(cidrs: readonly string[]): string | null {
  for (const cidr of cidrs) {
    const [address, length] = cidr.split('/');
    if (length === '32' && address.includes('.')) return address;
  }
  return null;
}

/** The first IPv6 /128 of a list of CIDR texts: a dual-stack peer's IPv6 address (issue 18). */
export function tunnelAddress6OfCidrs(cidrs: readonly string[]): string | null {
  for (const cidr of cidrs) {
    const [address, length] = cidr.split('/');
    if (length === '128' && address.includes(':')) return address;
  }
  return null;
}

/** `{ address6 }` for a dual-stack peer's CIDRs, nothing for an IPv4-only one. */
export function address6Field(cidrs: readonly string[]): { address6?: string } {
  const address6 = tunnelAddress6OfCidrs(cidrs);
  return address6 === null ? {} : { address6 };
}

function cidrsOf(peer: Pick<WireGuardPeer, 'allowedIps'>): string[] {
  return peer.allowedIps.map((p) => `${p.address}/${p.cidr}`);
}

function kernelPeer(peer: Pick<WireGuardPeer, 'publicKey' | 'allowedIps'>, view: KernelView) {
  const allowedIps = cidrsOf(peer);
  const address = tunnelAddressOfCidrs(allowedIps);
  const limit = address === null ? undefined : view.limits.get(address);
  const cap = address === null ? undefined : view.caps.get(address);
  const saved: SavedPeer = {
    publicKey: peer.publicKey,
    allowedIps,
    limit: limit?.download ?? limit?.upload ?? null,
    // The plan and the rate too (issue 19): the journal follows the kernel's within a boot.
    cap: cap ? capToKeep(cap) : null,
  };
  if (address !== null && view.suspended?.get(address) === peer.publicKey) saved.suspended = true;
  return saved;
}

function modeOf(saved: Readonly<SavedState>, view: KernelView): RestoreMode {
  if (saved.boot === null && saved.peers.size === 0 && saved.intents.size === 0) return 'first';
  if (view.created || saved.boot === null || saved.boot.bootId !== view.bootId) return 'reboot';
  if (saved.boot.ifindex !== view.ifindex && view.peers.length === 0) return 'reboot';
  return 'restart';
}

export function planRestore(saved: Readonly<SavedState>, view: KernelView): RestorePlan {
  const mode = modeOf(saved, view);
  const plan: RestorePlan = {
    mode,
    addPeers: [],
    removePeers: [],
    limits: [],
    caps: [],
    suspensions: [],
    next: new Map(),
    warnings: [],
  };
  const inKernel = new Map(view.peers.map((p) => [p.publicKey, p]));

  for (const publicKey of saved.intents.keys()) {
    if (inKernel.has(publicKey)) {
      plan.removePeers.push(publicKey);
      inKernel.delete(publicKey);
    }
    plan.warnings.push({
      event: 'create_never_answered',
      publicKey,
      message: `the create of peer ${publicKey} was never answered (its private key is lost): ${
        plan.removePeers.includes(publicKey) ? 'removed it from the kernel' : 'not restored'
      }`,
    });
  }

  for (const [publicKey, peer] of inKernel) {
    const current = kernelPeer(peer, view);
    const before = saved.peers.get(publicKey);
    plan.next.set(publicKey, current);
    if (mode === 'first') continue;
    if (before === undefined) {
      plan.warnings.push({
        event: 'peer_adopted',
        publicKey,
        message: `peer ${publicKey} (${current.allowedIps.join(', ')}) was added behind wg-peerd's back: adopted`,
      });
      continue;
    }
    if (mode === 'reboot') {
      // The kernel has the peer again (an operator's own config): what it lacks is put back.
      const address = tunnelAddressOfCidrs(current.allowedIps);
      const v6 = address6Field(current.allowedIps);
      if (address !== null && current.limit === null && before.limit !== null) {
        plan.limits.push({ publicKey, address, ...v6, bytesPerSecond: before.limit });
        current.limit = before.limit;
      }
      if (address !== null && current.cap === null && before.cap !== null) {
        plan.caps.push({ publicKey, address, ...v6, cap: before.cap });
        current.cap = { ...before.cap };
      }
      if (address !== null && current.suspended !== true && before.suspended === true) {
        plan.suspensions.push({ publicKey, address, ...v6 });
        current.suspended = true;
      }
      continue;
    }
    if (before.limit !== current.limit) {
      plan.warnings.push({
        event: 'limit_changed_behind_back',
        publicKey,
        message: `the speed limit of peer ${publicKey} is ${current.limit ?? 'none'} in the kernel, ${before.limit ?? 'none'} in the journal: kept the kernel's`,
      });
    }
    if ((before.cap?.quotaBytes ?? null) !== (current.cap?.quotaBytes ?? null)) {
      plan.warnings.push({
        event: 'cap_changed_behind_back',
        publicKey,
        message: `the data cap of peer ${publicKey} is ${current.cap?.quotaBytes ?? 'none'} in the kernel, ${before.cap?.quotaBytes ?? 'none'} in the journal: kept the kernel's`,
      });
    }
  }

  for (const [publicKey, before] of saved.peers) {
    if (inKernel.has(publicKey) || saved.intents.has(publicKey)) continue;
    if (mode === 'restart') {
      plan.warnings.push({
        event: 'peer_deleted_behind_back',
        publicKey,
        message: `peer ${publicKey} (${before.allowedIps.join(', ')}) was deleted behind wg-peerd's back: it stays deleted`,
      });
      continue;
    }
    const peer: SavedPeer = {
      publicKey,
      allowedIps: [...before.allowedIps],
      limit: before.limit,
      cap: before.cap === null ? null : { ...before.cap },
      ...(before.suspended === true ? { suspended: true } : {}),
    };
    plan.addPeers.push(peer);
    plan.next.set(publicKey, peer);
    const address = tunnelAddressOfCidrs(peer.allowedIps);
    if (address === null) continue;
    const v6 = address6Field(peer.allowedIps);
    if (peer.limit !== null) {
      plan.limits.push({ publicKey, address, ...v6, bytesPerSecond: peer.limit });
    }
    if (peer.cap !== null) plan.caps.push({ publicKey, address, ...v6, cap: peer.cap });
    if (peer.suspended === true) plan.suspensions.push({ publicKey, address, ...v6 });
  }
  return plan;
}
