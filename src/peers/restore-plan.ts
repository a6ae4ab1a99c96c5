/**
 * What a start with a state directory does, decided from one read of the kernel and the journal
 * (no I/O here: `planRestore` is a pure function, tested with literal inputs).
 *
 * The rules (issue 16; DESIGN §1):
 * - `first`: the journal has never recorded a boot and holds no peer: the daemon adopts what the
 *   kernel has, silently (an upgrade from a daemon without a state dir).
 * - `reboot`: the journal was written in another boot (boot_id differs), or the daemon has just
 *   created the interface, or the interface was recreated (another ifindex, empty or not, issue
 *   28): the kernel lost everything, so everything saved is put back: peers with their allowed
 *   IPs, limits, and caps with the bytes they had counted. What the kernel already has again (an
 *   operator's own config) keeps what it has and gets what it lacks.
 * - `restart`: same boot, same interface: an ordinary daemon restart. A saved peer the kernel no
 *   longer has was deleted behind the daemon's back and stays deleted; a limit or cap the kernel
 *   holds with another value than the journal is taken as the kernel has it (a warning each). A
 *   limit, cap (with its usage and plan) or suspension the journal holds and the kernel lost
 *   (`nft flush ruleset` while the daemon was down) is put back, as the runtime repair does, and
 *   logged as a repair (issue 28): a restart repairs, it does not forget. A delete saved whose
 *   peer the kernel still has (a crash cut it off before the kernel) is finished.
 * In every mode a peer the kernel has and the journal does not is adopted (a warning each, but
 * on a first start or when the interface itself is adopted: then one line counts them); a create
 * whose intent was saved but whose commit was not never answered: its private key went nowhere,
 * so the peer is unusable; it is removed from the kernel if there, and never restored. Nothing
 * put back takes an address another peer holds: a peer the kernel has keeps its addresses, and
 * of two saved peers on one IPv4 /32 or IPv6 /128 the journal's later one wins (a warning naming
 * both). Afterwards the journal is exactly the resulting state, with the current boot.
 *
 * The plan is computed in named steps, each a function of literal inputs (the tests give
 * literals in and expect literals out, as wgctrl-go's configure tests do), and carried out by
 * restore.ts.
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
  /**
   * The daemon adopted the interface during this start (bootstrap.ts): the peers the journal
   * does not hold are taken in without a warning each, and counted (`RestorePlan.adopted`).
   */
  adopted?: boolean;
  peers: readonly Pick<WireGuardPeer, 'publicKey' | 'allowedIps'>[];
  /** By tunnel address. */
  limits: ReadonlyMap<string, LimitState>;
  /** By tunnel address. */
  caps: ReadonlyMap<string, KernelDataCap>;
  /** Suspended tunnel address → owner's public key; absent: none. */
  suspended?: ReadonlyMap<string, string | null>;
  /** Preshared keys (base64) the kernel holds, by public key (issue 31); absent: none read. */
  presharedKeys?: ReadonlyMap<string, string>;
}

export interface RestoreWarning {
  event:
    | 'peer_deleted_behind_back'
    | 'peer_adopted'
    | 'create_never_answered'
    | 'limit_changed_behind_back'
    | 'cap_changed_behind_back'
    /** A restart put back what the journal holds and the kernel lost. */
    | 'kernel_repaired'
    /** A saved peer not put back: another peer holds its address. */
    | 'peer_address_taken'
    /** A restart finished a delete that a crash cut off between its record and the kernel. */
    | 'delete_finished';
  publicKey: string;
  message: string;
  /** kernel_repaired: the facility put back. */
  facility?: 'shaper' | 'quota' | 'suspension';
  /** kernel_repaired, peer_address_taken: the tunnel address concerned. */
  address?: string;
  /** peer_address_taken: the peer that keeps the address. */
  keptPublicKey?: string;
}

/** What the journal takes in from the kernel that it did not hold (peers adopted). */
export interface AdoptedCounts {
  peers: number;
  limits: number;
  caps: number;
  suspensions: number;
}

export interface RestorePlan {
  mode: RestoreMode;
  /** Peers to add to the kernel, whole. */
  addPeers: SavedPeer[];
  /** Public keys to remove from the kernel (creates never answered, deletes cut off). */
  removePeers: string[];
  /**
   * The facilities that hold something of a peer removed here (a delete cut off): reconciled
   * with the live peers, which takes it away.
   */
  cleanup: Set<'shaper' | 'quota' | 'suspension'>;
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
  adopted: AdoptedCounts;
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

/** A kernel peer as the journal would save it: its limit, cap and suspension as the kernel has them. */
export function kernelPeer(
  peer: Pick<WireGuardPeer, 'publicKey' | 'allowedIps'>,
  view: Pick<KernelView, 'limits' | 'caps' | 'suspended' | 'presharedKeys'>,
): SavedPeer {
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
  const presharedKey = view.presharedKeys?.get(peer.publicKey);
  if (presharedKey !== undefined) saved.presharedKey = presharedKey;
  return saved;
}

export function modeOf(
  saved: Readonly<SavedState>,
  view: Pick<KernelView, 'bootId' | 'ifindex' | 'created'>,
): RestoreMode {
  if (saved.boot === null && saved.peers.size === 0 && saved.intents.size === 0) return 'first';
  if (view.created || saved.boot === null || saved.boot.bootId !== view.bootId) return 'reboot';
  // Another ifindex: the interface was deleted and made again, which emptied it, whatever an
  // operator's config has put back since (issue 28).
  if (saved.boot.ifindex !== view.ifindex) return 'reboot';
  return 'restart';
}

export function planRestore(saved: Readonly<SavedState>, view: KernelView): RestorePlan {
  const plan: RestorePlan = {
    mode: modeOf(saved, view),
    addPeers: [],
    removePeers: [],
    cleanup: new Set(),
    limits: [],
    caps: [],
    suspensions: [],
    next: new Map(),
    warnings: [],
    adopted: { peers: 0, limits: 0, caps: 0, suspensions: 0 },
  };
  const inKernel = planUnansweredCreates(saved, view, plan);
  if (plan.mode === 'restart') planUnfinishedDeletes(saved, view, inKernel, plan);
  for (const peer of inKernel.values()) planKernelPeer(saved, view, peer, plan);
  if (plan.mode === 'restart') planDeletedBehindBack(saved, inKernel, plan);
  else planPutBack(saved, inKernel, plan);
  return plan;
}

/**
 * Step 1: creates never answered are removed from the kernel and never restored. Returns the
 * kernel's other peers by key.
 */
export function planUnansweredCreates(
  saved: Pick<SavedState, 'intents'>,
  view: Pick<KernelView, 'peers'>,
  plan: Pick<RestorePlan, 'removePeers' | 'warnings'>,
): Map<string, Pick<WireGuardPeer, 'publicKey' | 'allowedIps'>> {
  const inKernel = new Map(view.peers.map((p) => [p.publicKey, p]));
  for (const publicKey of saved.intents.keys()) {
    const removed = inKernel.delete(publicKey);
    if (removed) plan.removePeers.push(publicKey);
    plan.warnings.push({
      event: 'create_never_answered',
      publicKey,
      message: `the create of peer ${publicKey} was never answered (its private key is lost): ${
        removed ? 'removed it from the kernel' : 'not restored'
      }`,
    });
  }
  return inKernel;
}

/**
 * Step 1b, a restart: a delete saved (a tombstone) whose peer the kernel still has was cut off by
 * a crash between its record and the kernel: it is finished, the peer removed with its limit, cap
 * and suspension (issue 28). After a reboot the kernel's peer was put there by something else.
 */
export function planUnfinishedDeletes(
  saved: Pick<SavedState, 'tombstones'>,
  view: Pick<KernelView, 'limits' | 'caps' | 'suspended'>,
  inKernel: Map<string, Pick<WireGuardPeer, 'publicKey' | 'allowedIps'>>,
  plan: Pick<RestorePlan, 'removePeers' | 'cleanup' | 'warnings'>,
): void {
  for (const publicKey of saved.tombstones ?? []) {
    const peer = inKernel.get(publicKey);
    if (peer === undefined) continue;
    inKernel.delete(publicKey);
    plan.removePeers.push(publicKey);
    for (const address of hostAddresses(cidrsOf(peer))) {
      if (view.limits.has(address)) plan.cleanup.add('shaper');
      if (view.caps.has(address)) plan.cleanup.add('quota');
      if (view.suspended?.has(address) === true) plan.cleanup.add('suspension');
    }
    plan.warnings.push({
      event: 'delete_finished',
      publicKey,
      message: `the delete of peer ${publicKey} was saved but cut off before the kernel had it: finished it`,
    });
  }
}

/** Step 2: a peer the kernel has: adopted when the journal lacks it, else reconciled. */
function planKernelPeer(
  saved: Readonly<SavedState>,
  view: KernelView,
  peer: Pick<WireGuardPeer, 'publicKey' | 'allowedIps'>,
  plan: RestorePlan,
): void {
  const current = kernelPeer(peer, view);
  const before = saved.peers.get(peer.publicKey);
  // The kernel keeps no name (issue 31): the journal's stays.
  if (before?.name !== undefined) current.name = before.name;
  // The journal's expiry stays too (issue 31): the restore gives the kernel the time left.
  if (before?.expiresAt !== undefined) current.expiresAt = before.expiresAt;
  plan.next.set(peer.publicKey, current);
  if (before === undefined) {
    countAdopted(current, plan.adopted);
    if (plan.mode === 'first' || view.adopted === true) return;
    plan.warnings.push({
      event: 'peer_adopted',
      publicKey: current.publicKey,
      message: `peer ${current.publicKey} (${current.allowedIps.join(', ')}) was added behind wg-peerd's back: adopted`,
    });
    return;
  }
  if (plan.mode === 'first') return;
  putBackLost(before, current, plan);
  if (plan.mode === 'restart') plan.warnings.push(...changedBehindBack(before, current));
}

function countAdopted(peer: SavedPeer, counts: AdoptedCounts): void {
  counts.peers++;
  if (peer.limit !== null) counts.limits++;
  if (peer.cap !== null) counts.caps++;
  if (peer.suspended === true) counts.suspensions++;
}

/**
 * A limit, cap (its usage and plan with it) or suspension the journal holds for a peer the
 * kernel has, and the kernel lacks, is put back into the kernel and kept in `current`. After a
 * restart each is a repair (a warning); after a reboot it is what a reboot does.
 */
export function putBackLost(
  before: SavedPeer,
  current: SavedPeer,
  plan: Pick<RestorePlan, 'mode' | 'limits' | 'caps' | 'suspensions' | 'warnings'>,
): void {
  const address = tunnelAddressOfCidrs(current.allowedIps);
  if (address === null) return;
  const { publicKey } = current;
  const v6 = address6Field(current.allowedIps);
  const repaired = (facility: 'shaper' | 'quota' | 'suspension', what: string): void => {
    if (plan.mode !== 'restart') return;
    plan.warnings.push({
      event: 'kernel_repaired',
      publicKey,
      facility,
      address,
      message: `the kernel lost ${what} of peer ${publicKey} (${address}) while wg-peerd was down: put it back from the journal`,
    });
  };
  if (current.limit === null && before.limit !== null) {
    plan.limits.push({ publicKey, address, ...v6, bytesPerSecond: before.limit });
    current.limit = before.limit;
    repaired('shaper', `the speed limit (${before.limit} B/s)`);
  }
  if (current.cap === null && before.cap !== null) {
    plan.caps.push({ publicKey, address, ...v6, cap: before.cap });
    current.cap = { ...before.cap };
    repaired(
      'quota',
      `the data cap (${before.cap.quotaBytes} bytes, ${before.cap.usedBytes} used)`,
    );
  }
  if (current.suspended !== true && before.suspended === true) {
    plan.suspensions.push({ publicKey, address, ...v6 });
    current.suspended = true;
    repaired('suspension', 'the suspension');
  }
}

/** After a restart: a limit or cap the kernel holds with another value than the journal (kernel's kept). */
export function changedBehindBack(before: SavedPeer, current: SavedPeer): RestoreWarning[] {
  const { publicKey } = current;
  const warnings: RestoreWarning[] = [];
  if (before.limit !== current.limit) {
    warnings.push({
      event: 'limit_changed_behind_back',
      publicKey,
      message: `the speed limit of peer ${publicKey} is ${current.limit ?? 'none'} in the kernel, ${before.limit ?? 'none'} in the journal: kept the kernel's`,
    });
  }
  if ((before.cap?.quotaBytes ?? null) !== (current.cap?.quotaBytes ?? null)) {
    warnings.push({
      event: 'cap_changed_behind_back',
      publicKey,
      message: `the data cap of peer ${publicKey} is ${current.cap?.quotaBytes ?? 'none'} in the kernel, ${before.cap?.quotaBytes ?? 'none'} in the journal: kept the kernel's`,
    });
  }
  return warnings;
}

/** Step 3 after a restart: a saved peer the kernel no longer has stays deleted. */
function planDeletedBehindBack(
  saved: Readonly<SavedState>,
  inKernel: ReadonlyMap<string, unknown>,
  plan: RestorePlan,
): void {
  for (const [publicKey, before] of saved.peers) {
    if (inKernel.has(publicKey) || saved.intents.has(publicKey)) continue;
    plan.warnings.push({
      event: 'peer_deleted_behind_back',
      publicKey,
      message: `peer ${publicKey} (${before.allowedIps.join(', ')}) was deleted behind wg-peerd's back: it stays deleted`,
    });
  }
}

/**
 * Step 3 after a reboot: every saved peer the kernel lacks goes back whole, but for one whose
 * address another peer holds (sharedAddresses).
 */
function planPutBack(
  saved: Readonly<SavedState>,
  inKernel: ReadonlyMap<string, Pick<WireGuardPeer, 'publicKey' | 'allowedIps'>>,
  plan: RestorePlan,
): void {
  const candidates = [...saved.peers.values()].filter(
    (p) => !inKernel.has(p.publicKey) && !saved.intents.has(p.publicKey),
  );
  const held = [...inKernel.values()].map((p) => ({
    publicKey: p.publicKey,
    allowedIps: cidrsOf(p),
  }));
  const { kept, dropped } = sharedAddresses(held, candidates);
  plan.warnings.push(...dropped);
  for (const before of kept) {
    const peer: SavedPeer = {
      publicKey: before.publicKey,
      allowedIps: [...before.allowedIps],
      limit: before.limit,
      cap: before.cap === null ? null : { ...before.cap },
      ...(before.suspended === true ? { suspended: true } : {}),
      ...(before.presharedKey === undefined ? {} : { presharedKey: before.presharedKey }),
      ...(before.name === undefined ? {} : { name: before.name }),
      ...(before.expiresAt === undefined ? {} : { expiresAt: before.expiresAt }),
    };
    plan.addPeers.push(peer);
    plan.next.set(peer.publicKey, peer);
    const address = tunnelAddressOfCidrs(peer.allowedIps);
    if (address === null) continue;
    const { publicKey } = peer;
    const v6 = address6Field(peer.allowedIps);
    if (peer.limit !== null) {
      plan.limits.push({ publicKey, address, ...v6, bytesPerSecond: peer.limit });
    }
    if (peer.cap !== null) plan.caps.push({ publicKey, address, ...v6, cap: peer.cap });
    if (peer.suspended === true) plan.suspensions.push({ publicKey, address, ...v6 });
  }
}

/** The host addresses of CIDR texts: each IPv4 /32 and IPv6 /128 (what one peer alone may hold). */
export function hostAddresses(cidrs: readonly string[]): string[] {
  return cidrs
    .filter((cidr) => cidr.endsWith(cidr.includes(':') ? '/128' : '/32'))
    .map((cidr) => cidr.slice(0, cidr.lastIndexOf('/')));
}

/**
 * Which of the saved peers to put back (`candidates`, in journal order) go back, so that no two
 * peers share a host address: a peer the kernel has (`held`) keeps its addresses, and of two
 * candidates on one address the later wins (the journal's order is the order of creation: the
 * earlier one was removed behind the daemon's back and its address given again, issue 28). The
 * others are dropped, each with a warning naming both keys and the address.
 */
export function sharedAddresses(
  held: readonly Pick<SavedPeer, 'publicKey' | 'allowedIps'>[],
  candidates: readonly SavedPeer[],
): { kept: SavedPeer[]; dropped: RestoreWarning[] } {
  const owner = new Map<string, { publicKey: string; inKernel: boolean }>();
  for (const peer of held) {
    for (const address of hostAddresses(peer.allowedIps)) {
      owner.set(address, { publicKey: peer.publicKey, inKernel: true });
    }
  }
  const dropped = new Map<string, RestoreWarning>();
  const drop = (publicKey: string, keptPublicKey: string, address: string, by: string): void => {
    dropped.set(publicKey, {
      event: 'peer_address_taken',
      publicKey,
      keptPublicKey,
      address,
      message: `peers ${publicKey} and ${keptPublicKey} both hold ${address}: ${keptPublicKey} keeps it (${by}), ${publicKey} is not restored`,
    });
  };
  for (const peer of candidates) {
    const addresses = hostAddresses(peer.allowedIps);
    const live = addresses.find((a) => owner.get(a)?.inKernel === true);
    if (live !== undefined) {
      drop(peer.publicKey, owner.get(live)!.publicKey, live, 'the kernel has it');
      continue;
    }
    for (const address of addresses) {
      const earlier = owner.get(address);
      const other = earlier !== undefined && earlier.publicKey !== peer.publicKey;
      if (other && !dropped.has(earlier.publicKey)) {
        drop(earlier.publicKey, peer.publicKey, address, "the journal's later peer");
      }
      owner.set(address, { publicKey: peer.publicKey, inKernel: false });
    }
  }
  return {
    kept: candidates.filter((p) => !dropped.has(p.publicKey)),
    dropped: [...dropped.values()],
  };
}
