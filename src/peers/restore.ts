/**
 * Carries out a restore plan (restore-plan.ts) at start: one read of the kernel, the plan, the
 * kernel changes in bulk (peers in one WireGuard call, caps in one nf_tables transaction with
 * the bytes they had counted), then the journal rewritten as the result with the current boot.
 * The journal is rewritten only after the kernel has everything: a crash half-way leaves the old
 * journal, and the next start restores again (what the kernel already has is kept). When the
 * interface was adopted in this start (bootstrap.ts), the peers it had are saved here, and one
 * warn line (`interface_adopted`) says so with the counts (issue 28).
 */
import type { CapRef, Kernel, PeerRef } from '../kernel/types';
import type { StateStore } from '../state';
import { isFacilityAbsent, translateKernelError, type Facility } from './errors';
import type { AdoptedInterface } from './bootstrap';
import {
  address6Field,
  planRestore,
  tunnelAddressOfCidrs,
  type KernelView,
  type RestoreMode,
  type RestorePlan,
} from './restore-plan';
import type { EventLogger } from './contracts';
import { prefixOf } from './cidrs';

export interface RestoreSummary {
  mode: RestoreMode;
  /** Peers the journal holds afterwards. */
  peers: number;
  /** Peers put back into the kernel. */
  restoredPeers: number;
  restoredLimits: number;
  restoredCaps: number;
  restoredSuspensions: number;
  /** Peers the journal did not hold, taken from the kernel (adopted). */
  adopted: number;
  removed: number;
  /** Limits, caps and suspensions a restart put back from the journal (the kernel had lost them). */
  repaired: number;
  /** Saved peers not put back because another peer holds their address. */
  dropped: number;
  forgotten: number;
  milliseconds: number;
  /**
   * Where the milliseconds went, phase by phase in the order they ran (the kernel read, the plan,
   * each facility's changes, the journal's rewrite): what an operator or a benchmark compares
   * with the kernel's own tools doing the same work. Phases with nothing to do are absent.
   */
  phases: Record<string, number>;
}

/** Milliseconds per phase of one restore, in the order the phases ran (RestoreSummary.phases). */
class PhaseTimes {
  readonly phases: Record<string, number> = {};

  async time<T>(name: string, work: () => Promise<T>): Promise<T> {
    const started = performance.now();
    try {
      return await work();
    } finally {
      this.phases[name] = Math.round((this.phases[name] ?? 0) + performance.now() - started);
    }
  }

  timeSync<T>(name: string, work: () => T): T {
    const started = performance.now();
    try {
      return work();
    } finally {
      this.phases[name] = Math.round((this.phases[name] ?? 0) + performance.now() - started);
    }
  }
}

export interface RestoreOptions {
  kernel: Pick<Kernel, 'wireguard' | 'shaper' | 'quota' | 'suspension' | 'names' | 'expiry'>;
  store: Pick<StateStore, 'state' | 'replaceState'>;
  interfaceName: string;
  ifindex: number;
  /** The daemon created the interface in this start. */
  created: boolean;
  /** The interface found and adopted in this start (bootstrap.ts); absent or null: none. */
  adopted?: AdoptedInterface | null;
  bootId: string;
  logger: EventLogger;
}

async function step<T>(facility: Facility, ifname: string, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    throw translateKernelError(error, facility, ifname);
  }
}

async function optionalMap<K, V>(
  facility: Facility,
  ifname: string,
  read: () => Promise<Map<K, V>>,
): Promise<Map<K, V>> {
  try {
    return await step(facility, ifname, read);
  } catch (error) {
    if (isFacilityAbsent(error)) return new Map();
    throw error;
  }
}

type RestoreKernel = RestoreOptions['kernel'];

/** The kernel as read once at start: the device, limits, caps and suspensions. */
async function readKernel(options: RestoreOptions): Promise<KernelView> {
  const { kernel, interfaceName: ifname } = options;
  const [device, limits, caps, suspended] = await Promise.all([
    step('wireguard', ifname, () => kernel.wireguard.getDevice(ifname)),
    optionalMap('shaper', ifname, () => kernel.shaper.listLimits(ifname)),
    optionalMap('quota', ifname, () => kernel.quota.listCaps(ifname)),
    optionalMap('suspension', ifname, () => kernel.suspension.listSuspended(ifname)),
  ]);
  // Issue 31: the keys themselves, read only when a peer has one (a second dump).
  const presharedKeys = device.peers.some((p) => p.presharedKey === true)
    ? await presharedKeysOf(options)
    : undefined;
  return {
    bootId: options.bootId,
    ifindex: options.ifindex,
    created: options.created,
    adopted: options.adopted != null,
    peers: device.peers,
    limits,
    caps,
    suspended,
    ...(presharedKeys === undefined ? {} : { presharedKeys }),
  };
}

/** The peers' preshared keys as base64 text (what the journal keeps), the raw copies zeroed. */
async function presharedKeysOf(options: RestoreOptions): Promise<Map<string, string>> {
  const { kernel, interfaceName: ifname } = options;
  const raw = await step('wireguard', ifname, () => kernel.wireguard.readPresharedKeys(ifname));
  const keys = new Map<string, string>();
  for (const [publicKey, bytes] of raw) {
    keys.set(publicKey, bytes.toString('base64'));
    bytes.fill(0);
  }
  return keys;
}

/** The peers the journal holds afterwards, as the kernel facilities name them. */
function livePeers(plan: RestorePlan): PeerRef[] {
  const live: PeerRef[] = [];
  for (const peer of plan.next.values()) {
    const address = tunnelAddressOfCidrs(peer.allowedIps);
    if (address !== null) {
      live.push({ address, ...address6Field(peer.allowedIps), publicKey: peer.publicKey });
    }
  }
  return live;
}

const refOf = (p: { publicKey: string; address: string; address6?: string }): PeerRef => ({
  address: p.address,
  ...(p.address6 === undefined ? {} : { address6: p.address6 }),
  publicKey: p.publicKey,
});

/** The plan into the kernel: removals, suspensions (before the peers), peers, limits, caps. */
async function commitToKernel(
  kernel: RestoreKernel,
  ifname: string,
  plan: RestorePlan,
  times: PhaseTimes = new PhaseTimes(),
): Promise<void> {
  if (plan.removePeers.length > 0) {
    await times.time('wireguard', () =>
      step('wireguard', ifname, () => kernel.wireguard.removePeers(ifname, plan.removePeers)),
    );
  }
  const live = livePeers(plan);
  if (plan.suspensions.length > 0 || plan.cleanup.has('suspension')) {
    // Before the peers are back in WireGuard: a suspended peer never passes a packet.
    const restore = plan.suspensions.map(refOf);
    await times.time('suspension', () =>
      step('suspension', ifname, () => kernel.suspension.ensure(ifname, live, restore)),
    );
  }
  // The journal's expiries (issue 31), before the peers are back in WireGuard: each with its
  // time left from now, one that passed while the host was down expired at once.
  const expiries = new Map<string, number>();
  for (const peer of plan.next.values()) {
    if (peer.expiresAt !== undefined) expiries.set(peer.publicKey, peer.expiresAt);
  }
  try {
    await times.time('expiry', () =>
      step('expiry', ifname, () => kernel.expiry.ensure(ifname, live, expiries)),
    );
  } catch (error) {
    if (!isFacilityAbsent(error)) throw error;
  }
  if (plan.addPeers.length > 0) {
    const peers = plan.addPeers.map((p) => ({
      publicKey: p.publicKey,
      allowedIps: p.allowedIps.map(prefixOf),
      ...(p.presharedKey === undefined
        ? {}
        : { presharedKey: Buffer.from(p.presharedKey, 'base64') }),
    }));
    await times.time('wireguard', () =>
      step('wireguard', ifname, () => kernel.wireguard.addPeers(ifname, peers)),
    );
  }
  if (plan.limits.length > 0 || plan.cleanup.has('shaper')) {
    const limits = plan.limits.map((l) => ({ peer: refOf(l), bytesPerSecond: l.bytesPerSecond }));
    await times.time('shaper', () =>
      step('shaper', ifname, async () => {
        await kernel.shaper.ensure(ifname, live);
        if (limits.length > 0) await kernel.shaper.setLimits(ifname, limits);
      }),
    );
  }
  // The journal's names into the kernel's names set (issue 31), so a later start without the
  // state directory keeps them too; what else the set holds is removed. No nf_tables: no names
  // in the kernel (the journal still has them).
  const names = new Map<string, string>();
  for (const peer of plan.next.values()) {
    if (peer.name !== undefined) names.set(peer.publicKey, peer.name);
  }
  try {
    await times.time('names', () =>
      step('names', ifname, () => kernel.names.ensure(ifname, live, names)),
    );
  } catch (error) {
    if (!isFacilityAbsent(error)) throw error;
  }
  if (plan.caps.length > 0 || plan.cleanup.has('quota')) {
    const saved = new Map(plan.caps.map((c) => [c.publicKey, c.cap]));
    const withCaps: CapRef[] = live.map((peer) => {
      const cap = saved.get(peer.publicKey);
      return cap ? { ...peer, lastSeen: cap } : peer;
    });
    await times.time('quota', () =>
      step('quota', ifname, () => kernel.quota.ensure(ifname, withCaps)),
    );
  }
}

function logWarnings(logger: EventLogger, ifname: string, plan: RestorePlan): void {
  for (const w of plan.warnings) {
    const { event, publicKey, facility, address, keptPublicKey } = w;
    logger.warn(
      {
        event,
        interface: ifname,
        publicKey,
        ...(facility === undefined ? {} : { facility }),
        ...(address === undefined ? {} : { address }),
        ...(keptPublicKey === undefined ? {} : { keptPublicKey }),
      },
      w.message,
    );
  }
}

/** The one line of an adoption: the interface saved as the state directory's own, with counts. */
function logAdoption(
  logger: EventLogger,
  ifname: string,
  iface: AdoptedInterface,
  plan: RestorePlan,
): void {
  const { peers, limits, caps, suspensions } = plan.adopted;
  logger.warn(
    {
      event: 'interface_adopted',
      interface: ifname,
      publicKey: iface.publicKey,
      previousPublicKey: iface.previousPublicKey,
      listenPort: iface.listenPort,
      addresses: iface.addresses,
      peers,
      limits,
      caps,
      suspensions,
    },
    `the state directory did not hold interface ${ifname}: saved it as found (key, port, addresses) with ${peers} peers, ${limits} limits, ${caps} caps, ${suspensions} suspensions; a reboot puts it back as it is`,
  );
}

function summaryOf(plan: RestorePlan, started: number, times: PhaseTimes): RestoreSummary {
  const count = (event: string): number => plan.warnings.filter((w) => w.event === event).length;
  return {
    mode: plan.mode,
    peers: plan.next.size,
    restoredPeers: plan.addPeers.length,
    restoredLimits: plan.limits.length,
    restoredCaps: plan.caps.length,
    restoredSuspensions: plan.suspensions.length,
    adopted: plan.adopted.peers,
    removed: plan.removePeers.length,
    forgotten: count('peer_deleted_behind_back'),
    repaired: count('kernel_repaired'),
    dropped: count('peer_address_taken'),
    milliseconds: Math.round(performance.now() - started),
    phases: times.phases,
  };
}

function restoredMessage(summary: RestoreSummary): string {
  if (summary.mode === 'reboot') {
    return `state restored after a reboot: ${summary.restoredPeers} peers, ${summary.restoredLimits} limits, ${summary.restoredCaps} caps, ${summary.restoredSuspensions} suspensions put back`;
  }
  if (summary.mode === 'restart') {
    return summary.repaired === 0
      ? 'state checked against the kernel after a restart'
      : `state checked against the kernel after a restart: ${summary.repaired} limits, caps or suspensions the kernel had lost put back`;
  }
  return `state directory started: ${summary.peers} peers adopted from the kernel`;
}

export async function restoreFromState(options: RestoreOptions): Promise<RestoreSummary> {
  const started = performance.now();
  const { kernel, store, interfaceName: ifname, logger } = options;
  const times = new PhaseTimes();
  const view = await times.time('read', () => readKernel(options));
  const plan = times.timeSync('plan', () => planRestore(store.state, view));
  await commitToKernel(kernel, ifname, plan, times);
  logWarnings(logger, ifname, plan);
  await times.time('journal', () =>
    store.replaceState({
      boot: { bootId: options.bootId, ifindex: options.ifindex, interfaceName: ifname },
      iface: store.state.iface,
      peers: plan.next,
      intents: new Map(),
    }),
  );
  if (options.adopted) logAdoption(logger, ifname, options.adopted, plan);
  const summary = summaryOf(plan, started, times);
  logger.info({ event: 'state_restored', interface: ifname, ...summary }, restoredMessage(summary));
  return summary;
}
