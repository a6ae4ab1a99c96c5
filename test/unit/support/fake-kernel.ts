/**
 * An in-memory Kernel for unit tests. It keeps WireGuard's own rules where they matter to the
 * domain: an allowed IP belongs to one peer only (adding it to another peer moves it), the
 * device's public key follows from its private key, an unknown link is InterfaceMissingError, as the kernel layer
 * reports it. Every call is
 * recorded; any method can be made to fail or to wait.
 */
import { constants } from 'node:os';
import nacl from 'tweetnacl';
import type {
  CapPlan,
  AfterCap,
  DataCap,
  DeviceConfig,
  IpPrefix,
  Ipv4Address,
  Ipv6Address,
  Kernel,
  ExpiryApi,
  NamesApi,
  KernelDataCap,
  LimitState,
  LinkApi,
  LinkInfo,
  PeerConfig,
  PeerRef,
  ProbeApi,
  QuotaApi,
  SuspensionApi,
  Repair,
  ShaperApi,
  WireGuardApi,
  WireGuardDevice,
  WireGuardPeer,
} from '../../../src/kernel/types';
import {
  FacilityUnavailableError,
  InterfaceMissingError,
  KernelCallError,
} from '../../../src/kernel/errors';
import { NetlinkError } from '../../../src/netlink/errors';
import { SerialQueue } from '../../../src/netlink/serial-queue';

/** A raw refusal as the netlink socket reports it (for tests of the kernel boundary). */
export function netlinkError(
  code: keyof typeof constants.errno,
  operation: string,
  kernelMessage?: string,
): NetlinkError {
  return new NetlinkError({ errno: constants.errno[code], operation, kernelMessage });
}

/** A refusal as the kernel layer lets it out: typed, with no meaning beyond "failed". */
export function kernelFailure(
  code: keyof typeof constants.errno,
  operation: string,
  kernelMessage?: string,
): KernelCallError {
  return new KernelCallError(netlinkError(code, operation, kernelMessage));
}

interface FakeLimit {
  bytesPerSecond: number;
  publicKey: string;
  /** The direction lost behind the daemon's back (a device or qdisc deleted). */
  lost?: 'download' | 'upload';
}

interface FakeCap extends DataCap {
  publicKey: string;
  /** false: the map element is gone. */
  enforced?: boolean;
}

interface FakeLink {
  info: LinkInfo;
  addresses: Ipv4Address[];
  /** Global or unique-local IPv6 addresses (what getIpv6Addresses lists). */
  addresses6: Ipv6Address[];
}

interface FakeDevice {
  privateKey: Buffer | null;
  listenPort: number;
  fwmark: number;
  peers: WireGuardPeer[];
}

export interface Call {
  method: string;
  args: unknown[];
}

export interface InterfaceSetup {
  name?: string;
  address?: string;
  prefixLength?: number;
  listenPort?: number;
  /** false: the device has no private key. */
  withKey?: boolean;
  /** false: the interface has no IPv4 address. */
  withAddress?: boolean;
  /** A dual-stack interface: its IPv6 address and prefix, e.g. "fd42::1/64". */
  address6?: string;
}

function copyPeer(peer: WireGuardPeer): WireGuardPeer {
  return {
    ...peer,
    lastHandshake: peer.lastHandshake === null ? null : new Date(peer.lastHandshake.getTime()),
    allowedIps: peer.allowedIps.map((p) => ({ ...p })),
  };
}

const isGiven = (value: string | undefined): value is string => value !== undefined;

function samePrefix(a: IpPrefix, b: IpPrefix): boolean {
  return a.family === b.family && a.address === b.address && a.cidr === b.cidr;
}

export class FakeKernel implements Kernel {
  readonly calls: Call[] = [];
  readonly links = new Map<string, FakeLink>();
  readonly devices = new Map<string, FakeDevice>();
  /** ifname → address → limit. */
  readonly limits = new Map<string, Map<string, FakeLimit>>();
  /** ifname → address → cap. */
  readonly caps = new Map<string, Map<string, FakeCap>>();
  /** ifname → suspended address → owner's public key. */
  readonly suspended = new Map<string, Map<string, string>>();
  /** ifname → address → the name and its owner (the names set, src/kernel/names). */
  readonly namesSet = new Map<string, Map<string, { publicKey: string; name: string }>>();
  /**
   * ifname → address → the expiry and its owner (the `expiring` set, src/kernel/expiry); an
   * element of `valid` is live while `expiryClock()` is before `expiresAt`.
   */
  readonly expiries = new Map<string, Map<string, { publicKey: string; expiresAt: number }>>();
  /** The kernel's clock for expiry timeouts (ms since the epoch). */
  expiryClock: () => number = Date.now;
  primaryAddress: string | null = '203.0.113.10';
  closed = false;
  private nextIndex = 10;
  private readonly failures = new Map<string, { error: Error; once: boolean }>();
  /** The preshared key bytes each peer was given (WGPEER_A_PRESHARED_KEY), by public key. */
  readonly presharedKeys = new Map<string, Buffer>();

  readonly wireguard: WireGuardApi;
  readonly link: LinkApi;
  /** The kernel layer's change queue, as openKernel makes it. */
  readonly changes = new SerialQueue();
  readonly shaper: ShaperApi;
  readonly quota: QuotaApi;
  readonly suspension: SuspensionApi;
  readonly names: NamesApi;
  readonly expiry: ExpiryApi;
  readonly probe: ProbeApi;
  /** Registered generic netlink families; delete 'wireguard' for a kernel without the module. */
  readonly genlFamilies = new Set(['wireguard']);
  /** The nf_tables ruleset generation; each probe reads it, nothing else changes it. */
  nftGeneration = 1;

  constructor() {
    this.wireguard = {
      getDevice: (name) =>
        this.op('getDevice', [name], () => {
          // A dump reads the state as it is when it starts.
          const device = this.requireDevice(name);
          const link = this.links.get(name)!;
          const snapshot: WireGuardDevice = {
            name,
            ifindex: link.info.index,
            publicKey: device.privateKey === null ? null : this.publicOf(device.privateKey),
            listenPort: device.listenPort,
            fwmark: device.fwmark,
            peers: device.peers.map(copyPeer),
          };
          return snapshot;
        }),
      configureDevice: (name, config: DeviceConfig) =>
        this.op(
          'configureDevice',
          [name, { ...config, privateKey: config.privateKey ? '<bytes>' : undefined }],
          () => {
            const device = this.requireDevice(name);
            if (config.privateKey) device.privateKey = Buffer.from(config.privateKey);
            if (config.listenPort !== undefined) device.listenPort = config.listenPort;
          },
        ),
      addPeers: (name, peers: PeerConfig[]) =>
        this.op('addPeers', [name, peers], () => {
          const device = this.requireDevice(name);
          for (const config of peers) {
            let peer = device.peers.find((p) => p.publicKey === config.publicKey);
            if (peer === undefined) {
              if (config.updateOnly) continue;
              peer = {
                publicKey: config.publicKey,
                endpoint: null,
                lastHandshake: null,
                rxBytes: 0,
                txBytes: 0,
                persistentKeepalive: config.persistentKeepalive ?? 0,
                allowedIps: [],
              };
              device.peers.push(peer);
            }
            if (config.presharedKey !== undefined) {
              // As the kernel: all zeros remove it (wireguard.h), the dump says only whether set.
              const bytes = Buffer.from(config.presharedKey);
              this.presharedKeys.set(config.publicKey, bytes);
              if (bytes.some((b) => b !== 0)) peer.presharedKey = true;
              else delete peer.presharedKey;
            }
            if (config.replaceAllowedIps) peer.allowedIps = [];
            for (const prefix of config.allowedIps) {
              // WireGuard: an allowed IP has one owner; giving it to this peer takes it away.
              for (const other of device.peers) {
                other.allowedIps = other.allowedIps.filter((p) => !samePrefix(p, prefix));
              }
              peer.allowedIps.push({ ...prefix });
            }
          }
        }),
      removePeers: (name, keys: string[]) =>
        this.op('removePeers', [name, keys], () => {
          const device = this.requireDevice(name);
          device.peers = device.peers.filter((p) => !keys.includes(p.publicKey));
        }),
      // A copy, as the kernel's reply is: the caller zeroes it.
      readPresharedKeys: (name) =>
        this.op('readPresharedKeys', [name], () => {
          const held = new Set(this.requireDevice(name).peers.map((p) => p.publicKey));
          return new Map(
            [...this.presharedKeys]
              .filter(([key, bytes]) => held.has(key) && bytes.some((b) => b !== 0))
              .map(([key, bytes]) => [key, Buffer.from(bytes)]),
          );
        }),
      readPrivateKey: (name) =>
        this.op('readPrivateKey', [name], () => {
          const key = this.requireDevice(name).privateKey;
          return key === null ? null : Buffer.from(key);
        }),
    };

    this.link = {
      getLink: (name) =>
        this.op('getLink', [name], () => {
          const link = this.links.get(name);
          if (link === undefined) throw new InterfaceMissingError(name);
          return { ...link.info };
        }),
      getIpv4Addresses: (index) =>
        this.op('getIpv4Addresses', [index], () => {
          const link = [...this.links.values()].find((l) => l.info.index === index);
          return link ? link.addresses.map((a) => ({ ...a })) : [];
        }),
      getIpv6Addresses: (index) =>
        this.op('getIpv6Addresses', [index], () => {
          const link = [...this.links.values()].find((l) => l.info.index === index);
          return link ? link.addresses6.map((a) => ({ ...a })) : [];
        }),
      createWireGuard: (name) =>
        this.op('createWireGuard', [name], () => {
          if (this.links.has(name)) throw kernelFailure('EEXIST', `RTM_NEWLINK ${name}`);
          const index = this.nextIndex++;
          this.links.set(name, {
            info: { index, name, kind: 'wireguard', up: false, mtu: 1420 },
            addresses: [],
            addresses6: [],
          });
          this.devices.set(name, { privateKey: null, listenPort: 0, fwmark: 0, peers: [] });
          return index;
        }),
      addIpv4Address: (index, address) =>
        this.op('addIpv4Address', [index, address], () => {
          this.linkByIndex(index).addresses.push({ ...address });
        }),
      addIpv6Address: (index, address) =>
        this.op('addIpv6Address', [index, address], () => {
          this.linkByIndex(index).addresses6.push({ ...address });
        }),
      setUp: (index) =>
        this.op('setUp', [index], () => {
          this.linkByIndex(index).info.up = true;
        }),
      deleteLink: (index) =>
        this.op('deleteLink', [index], () => {
          const link = this.linkByIndex(index);
          this.links.delete(link.info.name);
          this.devices.delete(link.info.name);
        }),
      primaryIpv4: () => this.op('primaryIpv4', [], () => this.primaryAddress),
    };

    this.probe = {
      genlFamily: (name) =>
        this.op('probe.genlFamily', [name], () => {
          // nlctrl answers ENOENT for a family nobody registered; the probe's boundary names it.
          if (!this.genlFamilies.has(name)) {
            throw new FacilityUnavailableError(
              `WireGuard (generic netlink family "${name}": ENOENT)`,
              'load the module with `modprobe wireguard`',
            );
          }
        }),
      // The fake holds no qdiscs: the daemon's are the shaper's, kept as limits here.
      qdiscCount: (ifindex) => this.op('probe.qdiscCount', [ifindex], () => 0),
      nftGeneration: () => this.op('probe.nftGeneration', [], () => this.nftGeneration),
    };

    this.shaper = {
      // The contract of ShaperApi.ensure, in memory: drop what no live peer has, restore the
      // direction a live peer's limit lost.
      ensure: (ifname, live) =>
        this.op('shaper.ensure', [ifname, live], () => {
          const addresses = new Set(live.map((peer) => peer.address));
          const repairs: Repair[] = [];
          for (const [address, limit] of [...this.limitsOf(ifname)]) {
            if (!addresses.has(address)) {
              this.limitsOf(ifname).delete(address);
              repairs.push({ address, found: 'limit without a peer', done: 'removed' });
            } else if (limit.lost !== undefined) {
              repairs.push({ address, found: `${limit.lost} lost`, done: 'restored' });
              delete limit.lost;
            }
          }
          return repairs;
        }),
      setLimit: (ifname, peer: PeerRef, bytesPerSecond) =>
        this.op('shaper.setLimit', [ifname, peer, bytesPerSecond], () => {
          this.limitsOf(ifname).set(peer.address, { bytesPerSecond, publicKey: peer.publicKey });
        }),
      setLimits: (ifname, limits) =>
        this.op('shaper.setLimits', [ifname, limits], () => {
          for (const { peer, bytesPerSecond } of limits) {
            this.limitsOf(ifname).set(peer.address, { bytesPerSecond, publicKey: peer.publicKey });
          }
        }),
      // A dual-stack peer's IPv6 address is recorded when given (its limit is the same object).
      removeLimit: (ifname, address, address6?: string) =>
        this.op('shaper.removeLimit', [ifname, address, address6].filter(isGiven), () => {
          this.limitsOf(ifname).delete(address);
        }),
      listLimits: (ifname) =>
        this.op('shaper.listLimits', [ifname], () => {
          const out = new Map<string, LimitState>();
          for (const [address, limit] of this.limitsOf(ifname)) {
            out.set(address, {
              download: limit.lost === 'download' ? null : limit.bytesPerSecond,
              upload: limit.lost === 'upload' ? null : limit.bytesPerSecond,
            });
          }
          return out;
        }),
    };

    this.quota = {
      // The contract of QuotaApi.ensure, in memory.
      ensure: (ifname, live) =>
        this.op('quota.ensure', [ifname, live], () => {
          const peers = new Map(live.map((peer) => [peer.address, peer]));
          const caps = this.capsOf(ifname);
          const repairs: Repair[] = [];
          for (const [address, cap] of [...caps]) {
            const peer = peers.get(address);
            if (peer === undefined || peer.publicKey !== cap.publicKey) {
              caps.delete(address);
              repairs.push({ address, found: 'cap without its peer', done: 'removed' });
            } else if (cap.enforced === false) {
              cap.enforced = true;
              repairs.push({ address, found: 'element missing', done: 'added' });
            }
          }
          for (const peer of live) {
            if (peer.lastSeen === undefined || caps.has(peer.address)) continue;
            caps.set(peer.address, { ...peer.lastSeen, publicKey: peer.publicKey });
            repairs.push({ address: peer.address, found: 'cap lost', done: 'restored' });
          }
          return repairs;
        }),
      setCap: (ifname, peer: PeerRef, quotaBytes, plan?: CapPlan | null, afterCap?: AfterCap) =>
        this.op(
          'quota.setCap',
          // A plan (and afterCap) only when passed: calls without them read as they always did.
          [
            ifname,
            peer,
            quotaBytes,
            ...(plan !== undefined || afterCap !== undefined ? [plan] : []),
            ...(afterCap !== undefined ? [afterCap] : []),
          ],
          () => {
            const caps = this.capsOf(ifname);
            const before = caps.get(peer.address);
            const mine = before?.publicKey === peer.publicKey;
            // The contract of QuotaApi.setCap: afterCap undefined keeps what the cap did.
            const throttleBytesPerSecond =
              afterCap?.throttleBytesPerSecond ??
              (afterCap ? null : mine ? before?.throttleBytesPerSecond : null);
            caps.set(peer.address, {
              quotaBytes,
              usedBytes: before?.usedBytes ?? 0,
              publicKey: peer.publicKey,
              plan: plan === undefined ? (mine ? (before?.plan ?? null) : null) : plan,
              ...(throttleBytesPerSecond == null ? {} : { throttleBytesPerSecond }),
            });
          },
        ),
      getCap: (ifname, peer: PeerRef) =>
        this.op('quota.getCap', [ifname, peer], () => {
          const cap = this.capsOf(ifname).get(peer.address);
          if (!cap || cap.publicKey !== peer.publicKey) return null;
          return {
            quotaBytes: cap.quotaBytes,
            usedBytes: cap.usedBytes,
            plan: cap.plan ?? null,
            throttleBytesPerSecond: cap.throttleBytesPerSecond ?? null,
          };
        }),
      // The contract of QuotaApi.resetPeriod, in memory.
      resetPeriod: (ifname, peer: PeerRef, due) =>
        this.op('quota.resetPeriod', [ifname, peer, due], () => {
          const cap = this.capsOf(ifname).get(peer.address);
          const plan = cap?.plan;
          if (!cap || !plan || cap.publicKey !== peer.publicKey || plan.periodFrom >= due) {
            return null;
          }
          const rate = cap.throttleBytesPerSecond ?? null;
          const closing = {
            quotaBytes: cap.quotaBytes,
            usedBytes: cap.usedBytes,
            ...(rate === null ? {} : { throttleBytesPerSecond: rate }),
          };
          cap.usedBytes = 0;
          cap.plan = { ...plan, periodFrom: due, previousUsedBytes: closing.usedBytes };
          return { closing, plan: cap.plan };
        }),
      resetCap: (ifname, peer: PeerRef) =>
        this.op('quota.resetCap', [ifname, peer], () => {
          const cap = this.capsOf(ifname).get(peer.address);
          if (cap === undefined || cap.publicKey !== peer.publicKey) return null;
          const closing = { quotaBytes: cap.quotaBytes, usedBytes: cap.usedBytes };
          cap.usedBytes = 0;
          return closing;
        }),
      setDualStack: (ifname, dualStack) =>
        this.op('quota.setDualStack', [ifname, dualStack], () => [] as Repair[]),
      removeCap: (ifname, address, address6?: string) =>
        this.op('quota.removeCap', [ifname, address, address6].filter(isGiven), () => {
          this.capsOf(ifname).delete(address);
        }),
      listCaps: (ifname) =>
        this.op('quota.listCaps', [ifname], () => {
          const out = new Map<string, KernelDataCap>();
          for (const [address, cap] of this.capsOf(ifname)) {
            const enforced = cap.enforced !== false;
            const rate = cap.throttleBytesPerSecond ?? null;
            const planned = cap.plan ? { plan: cap.plan } : {};
            out.set(
              address,
              rate === null
                ? { quotaBytes: cap.quotaBytes, usedBytes: cap.usedBytes, enforced, ...planned }
                : {
                    quotaBytes: cap.quotaBytes,
                    usedBytes: cap.usedBytes,
                    enforced,
                    ...planned,
                    throttleBytesPerSecond: rate,
                    throttled: enforced && cap.usedBytes >= cap.quotaBytes,
                  },
            );
          }
          return out;
        }),
    };

    this.suspension = {
      // The contract of SuspensionApi.ensure, in memory.
      ensure: (ifname, live, restore = []) =>
        this.op('suspension.ensure', [ifname, live, restore], () => {
          const owners = new Map(live.map((peer) => [peer.address, peer.publicKey]));
          const suspended = this.suspendedOf(ifname);
          const repairs: Repair[] = [];
          for (const [address, owner] of [...suspended]) {
            if (owners.get(address) !== owner) {
              suspended.delete(address);
              repairs.push({ address, found: 'suspension without its peer', done: 'removed' });
            }
          }
          for (const peer of restore) suspended.set(peer.address, peer.publicKey);
          return repairs;
        }),
      suspend: (ifname, peer: PeerRef) =>
        this.op('suspension.suspend', [ifname, peer], () => {
          this.suspendedOf(ifname).set(peer.address, peer.publicKey);
        }),
      resume: (ifname, address, address6?: string | null) =>
        this.op(
          'suspension.resume',
          [ifname, address, address6 ?? undefined].filter(isGiven),
          () => {
            this.suspendedOf(ifname).delete(address);
          },
        ),
      listSuspended: (ifname) =>
        this.op('suspension.listSuspended', [ifname], () => {
          return new Map<string, string | null>(this.suspendedOf(ifname));
        }),
    };

    this.names = {
      // The contract of NamesApi, in memory.
      listNames: (ifname) =>
        this.op('names.listNames', [ifname], () =>
          [...this.namesOf(ifname)].map(([address, n]) => ({ address, ...n })),
        ),
      setNames: (ifname, names) =>
        this.op('names.setNames', [ifname, names], () => {
          const set = this.namesOf(ifname);
          for (const { peer, name } of names) {
            if (name === null) set.delete(peer.address);
            else set.set(peer.address, { publicKey: peer.publicKey, name });
          }
        }),
      removeNames: (ifname, addresses) =>
        this.op('names.removeNames', [ifname, addresses], () => {
          for (const address of addresses) this.namesOf(ifname).delete(address);
        }),
      ensure: (ifname, live, wanted) =>
        this.op('names.ensure', [ifname, live, wanted], () => {
          const set = this.namesOf(ifname);
          const owners = new Map(live.map((peer) => [peer.address, peer.publicKey]));
          const repairs: Repair[] = [];
          for (const [address, n] of [...set]) {
            if (owners.get(address) !== n.publicKey) {
              set.delete(address);
              repairs.push({ address, found: 'name without its peer', done: 'removed it' });
            }
          }
          if (wanted !== undefined) {
            for (const peer of live) {
              const name = wanted.get(peer.publicKey);
              if (name === undefined) set.delete(peer.address);
              else set.set(peer.address, { publicKey: peer.publicKey, name });
            }
          }
          const names = new Map<string, string>();
          for (const n of set.values()) names.set(n.publicKey, n.name);
          return { names, repairs };
        }),
    };

    this.expiry = {
      // The contract of ExpiryApi, in memory (IPv4 addresses only).
      listExpiries: (ifname) =>
        this.op('expiry.listExpiries', [ifname], () =>
          [...this.expiriesOf(ifname)].map(([address, e]) => ({ address, ...e })),
        ),
      listValid: (ifname) =>
        this.op('expiry.listValid', [ifname], () => {
          const now = this.expiryClock();
          return new Set(
            [...this.expiriesOf(ifname)]
              .filter(([, e]) => e.expiresAt > now)
              .map(([address]) => address),
          );
        }),
      setExpiry: (ifname, peer, expiresAt) =>
        this.op('expiry.setExpiry', [ifname, peer, expiresAt], () => {
          const set = this.expiriesOf(ifname);
          if (expiresAt === null) set.delete(peer.address);
          else set.set(peer.address, { publicKey: peer.publicKey, expiresAt });
        }),
      removeExpiries: (ifname, refs) =>
        this.op('expiry.removeExpiries', [ifname, refs], () => {
          for (const ref of refs) this.expiriesOf(ifname).delete(ref.address);
        }),
      ensure: (ifname, live, wanted) =>
        this.op('expiry.ensure', [ifname, live, wanted], () => {
          const set = this.expiriesOf(ifname);
          set.clear();
          for (const peer of live) {
            const expiresAt = wanted.get(peer.publicKey);
            if (expiresAt !== undefined) {
              set.set(peer.address, { publicKey: peer.publicKey, expiresAt });
            }
          }
        }),
    };
  }

  private expiriesOf(ifname: string): Map<string, { publicKey: string; expiresAt: number }> {
    let expiries = this.expiries.get(ifname);
    if (expiries === undefined) {
      expiries = new Map();
      this.expiries.set(ifname, expiries);
    }
    return expiries;
  }

  private namesOf(ifname: string): Map<string, { publicKey: string; name: string }> {
    let names = this.namesSet.get(ifname);
    if (names === undefined) {
      names = new Map();
      this.namesSet.set(ifname, names);
    }
    return names;
  }

  private suspendedOf(ifname: string): Map<string, string> {
    let suspended = this.suspended.get(ifname);
    if (suspended === undefined) {
      suspended = new Map();
      this.suspended.set(ifname, suspended);
    }
    return suspended;
  }

  close(): void {
    this.closed = true;
  }

  // ---- test set-up and inspection -------------------------------------------------------

  /** A WireGuard interface with a key and an address, like `wg-peerd` leaves it. */
  static withInterface(setup: InterfaceSetup = {}): FakeKernel {
    const kernel = new FakeKernel();
    kernel.addInterface(setup);
    return kernel;
  }

  addInterface(setup: InterfaceSetup = {}): void {
    const name = setup.name ?? 'wg0';
    const index = this.nextIndex++;
    this.links.set(name, {
      info: { index, name, kind: 'wireguard', up: true, mtu: 1420 },
      addresses:
        setup.withAddress === false
          ? []
          : [{ address: setup.address ?? '10.8.0.1', prefixLength: setup.prefixLength ?? 24 }],
      addresses6:
        setup.address6 === undefined
          ? []
          : [
              {
                address: setup.address6.split('/')[0]!,
                prefixLength: Number(setup.address6.split('/')[1]),
              },
            ],
    });
    const privateKey = Buffer.alloc(32, 7);
    privateKey[0] = privateKey[0]! & 248;
    privateKey[31] = (privateKey[31]! & 127) | 64;
    this.devices.set(name, {
      privateKey: setup.withKey === false ? null : privateKey,
      listenPort: setup.listenPort ?? 51820,
      fwmark: 0,
      peers: [],
    });
  }

  addOtherLink(name: string, kind: string | null): void {
    const index = this.nextIndex++;
    this.links.set(name, {
      info: { index, name, kind, up: true, mtu: 1500 },
      addresses: [],
      addresses6: [],
    });
  }

  /** Puts a peer straight into the device, as an operator's `wg set` would. */
  putPeer(
    publicKey: string,
    allowedIps: string[],
    extra: Partial<Omit<WireGuardPeer, 'publicKey' | 'allowedIps'>> = {},
    ifname = 'wg0',
  ): void {
    this.requireDevice(ifname).peers.push({
      publicKey,
      endpoint: null,
      lastHandshake: null,
      rxBytes: 0,
      txBytes: 0,
      persistentKeepalive: 0,
      ...extra,
      allowedIps: allowedIps.map((text) => {
        const [address, cidr] = text.split('/');
        return {
          family: address!.includes(':') ? 6 : 4,
          address: address!,
          cidr: Number(cidr),
        } as IpPrefix;
      }),
    });
  }

  peers(ifname = 'wg0'): WireGuardPeer[] {
    return this.requireDevice(ifname).peers.map(copyPeer);
  }

  serverPublicKey(ifname = 'wg0'): string | null {
    const key = this.requireDevice(ifname).privateKey;
    return key === null ? null : this.publicOf(key);
  }

  /** Behind the daemon's back: the limit of `address` no longer holds in `direction`. */
  loseLimitDirection(address: string, direction: 'download' | 'upload', ifname = 'wg0'): void {
    const limit = this.limitsOf(ifname).get(address);
    if (limit === undefined) throw new Error(`no limit for ${address}`);
    limit.lost = direction;
  }

  /** Behind the daemon's back: the nft table, and every cap with it, is deleted. */
  loseAllCaps(ifname = 'wg0'): void {
    this.capsOf(ifname).clear();
  }

  setUsed(address: string, usedBytes: number, ifname = 'wg0'): void {
    const cap = this.capsOf(ifname).get(address);
    if (cap === undefined) throw new Error(`no cap for ${address}`);
    cap.usedBytes = usedBytes;
  }

  count(method: string): number {
    return this.calls.filter((c) => c.method === method).length;
  }

  /** The next call(s) of `method` throw `error`; `once: false` keeps failing. */
  fail(method: string, error: Error, once = true): void {
    this.failures.set(method, { error, once });
  }

  /**
   * The next call of `method` waits (after reading state) until the returned function is
   * called: a dump in flight.
   */
  hold(method: string): () => void {
    let release: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    this.gates.set(method, [...(this.gates.get(method) ?? []), gate]);
    return () => release();
  }

  private readonly gates = new Map<string, Promise<void>[]>();

  private async op<T>(method: string, args: unknown[], body: () => T): Promise<T> {
    this.calls.push({ method, args });
    // Every kernel call takes a turn of the event loop, as a socket round trip would.
    await new Promise<void>((resolve) => setImmediate(resolve));
    const failure = this.failures.get(method);
    if (failure !== undefined) {
      if (failure.once) this.failures.delete(method);
      throw failure.error;
    }
    const result = body();
    const gates = this.gates.get(method);
    if (gates !== undefined && gates.length > 0) {
      const gate = gates.shift()!;
      await gate;
    }
    return result;
  }

  private requireDevice(name: string): FakeDevice {
    const device = this.devices.get(name);
    if (device === undefined) throw new InterfaceMissingError(name);
    return device;
  }

  private linkByIndex(index: number): FakeLink {
    const link = [...this.links.values()].find((l) => l.info.index === index);
    if (link === undefined) throw new InterfaceMissingError(`with ifindex ${index}`);
    return link;
  }

  private limitsOf(ifname: string): Map<string, FakeLimit> {
    let map = this.limits.get(ifname);
    if (map === undefined) this.limits.set(ifname, (map = new Map()));
    return map;
  }

  private capsOf(ifname: string): Map<string, FakeCap> {
    let map = this.caps.get(ifname);
    if (map === undefined) this.caps.set(ifname, (map = new Map()));
    return map;
  }

  private publicOf(privateKey: Buffer): string {
    return Buffer.from(nacl.scalarMult.base(privateKey)).toString('base64');
  }
}
