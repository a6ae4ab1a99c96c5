/**
 * What the kernel facilities offer the domain, in domain terms. `src/peers` depends on these
 * interfaces only, so a test can hand PeerService a kernel backed by a recorded transcript or a
 * fake. Keys are standard base64 strings of 32 bytes throughout.
 */

/** An IP prefix as WireGuard's allowed IPs hold it. */
export interface IpPrefix {
  family: 4 | 6;
  /** Dotted IPv4 or RFC 5952 IPv6 text. */
  address: string;
  cidr: number;
}

export interface WireGuardPeer {
  publicKey: string;
  /** "203.0.113.7:51820" or "[2001:db8::1]:51820"; null before the peer was ever seen. */
  endpoint: string | null;
  /** Wall-clock time of the last handshake; null when there never was one. */
  lastHandshake: Date | null;
  rxBytes: number;
  txBytes: number;
  /** Seconds; 0 means off. */
  persistentKeepalive: number;
  allowedIps: IpPrefix[];
  /**
   * True when the kernel holds a non-zero preshared key for the peer; absent when it holds none
   * (so peers without one keep the shape they always had).
   */
  presharedKey?: true;
}

export interface WireGuardDevice {
  name: string;
  ifindex: number;
  /** The device's public key; null when no private key is set. */
  publicKey: string | null;
  listenPort: number;
  fwmark: number;
  peers: WireGuardPeer[];
}

export interface PeerConfig {
  publicKey: string;
  allowedIps: IpPrefix[];
  /** Replace the peer's allowed IPs instead of adding to them (WGPEER_F_REPLACE_ALLOWEDIPS). */
  replaceAllowedIps?: boolean;
  /** Only change an existing peer, never create one (WGPEER_F_UPDATE_ONLY). */
  updateOnly?: boolean;
  persistentKeepalive?: number;
  /** 32 raw bytes (WGPEER_A_PRESHARED_KEY); never logged. Absent: left as the peer has it. */
  presharedKey?: Buffer;
}

export interface DeviceConfig {
  /** 32 raw bytes; never logged, never returned. */
  privateKey?: Buffer;
  listenPort?: number;
}

/** Generic-netlink WireGuard (src/kernel/wireguard.ts). */
export interface WireGuardApi {
  getDevice(name: string): Promise<WireGuardDevice>;
  configureDevice(name: string, config: DeviceConfig): Promise<void>;
  addPeers(name: string, peers: PeerConfig[]): Promise<void>;
  removePeers(name: string, publicKeys: string[]): Promise<void>;
  /**
   * The device's private key (32 bytes; null when it has none), for saving an adopted interface
   * (issue 28). The caller zeroes it after use and never logs it.
   */
  readPrivateKey(name: string): Promise<Buffer | null>;
  /**
   * The peers' non-zero preshared keys (32 raw bytes each) by public key (issue 31): for a peer
   * the state directory takes from the kernel. The caller zeroes them and never logs them.
   */
  readPresharedKeys(name: string): Promise<Map<string, Buffer>>;
}

export interface LinkInfo {
  index: number;
  name: string;
  /** IFLA_INFO_KIND, e.g. "wireguard"; null for links without one. */
  kind: string | null;
  up: boolean;
  mtu: number;
}

export interface Ipv4Address {
  address: string;
  prefixLength: number;
}

/** An IPv6 address of an interface (RFC 5952 text) and its prefix length. */
export interface Ipv6Address {
  address: string;
  prefixLength: number;
}

/** rtnetlink links and addresses (src/kernel/link.ts). */
export interface LinkApi {
  /** Throws InterfaceMissingError (src/kernel/errors.ts) when there is no such link. */
  getLink(name: string): Promise<LinkInfo>;
  getIpv4Addresses(index: number): Promise<Ipv4Address[]>;
  /** Global and unique-local addresses (RT_SCOPE_UNIVERSE), never link-local ones. */
  getIpv6Addresses(index: number): Promise<Ipv6Address[]>;
  /** RTM_NEWLINK kind "wireguard"; returns the new ifindex. */
  createWireGuard(name: string, options?: { mtu?: number }): Promise<number>;
  addIpv4Address(index: number, address: Ipv4Address): Promise<void>;
  addIpv6Address(index: number, address: Ipv6Address): Promise<void>;
  setUp(index: number): Promise<void>;
  deleteLink(index: number): Promise<void>;
  /** Preferred source address of the default route (RTM_GETROUTE), null when there is none. */
  primaryIpv4(): Promise<string | null>;
}

/** A peer as the shaper and the quota see it: its tunnel address is the key of everything. */
export interface PeerRef {
  /** The peer's IPv4 tunnel address (its /32 allowed IP). */
  address: string;
  /**
   * A dual-stack peer's IPv6 address (its first /128 allowed IP; issue 18): its limit and cap
   * cover this address too, in the same class and quota object. Absent or null: IPv4 only.
   */
  address6?: string | null;
  /** Base64 public key, stored as userdata/comments where the kernel object has room for it. */
  publicKey: string;
}

/**
 * What a repair found and did, one entry per finding; the kernel layer returns it and the
 * service logs each at warn (the kernel layer has no logger).
 */
export interface Repair {
  /** The peer address concerned; null for the shared skeleton (qdiscs, IFB, table, chains). */
  address: string | null;
  /** What was found, e.g. "upload limit 11111 B/s on ifb-wg0 but no download limit on wg0". */
  found: string;
  /** What was done about it, e.g. "restored the download limit at 11111 B/s". */
  done: string;
}

/**
 * A limit as it holds in the kernel, per direction: download on the WireGuard interface's
 * egress, upload on the IFB's. null: no limit holds in that direction.
 */
export interface LimitState {
  download: number | null;
  upload: number | null;
}

/** A speed limit to set: bytes per second in each direction. */
export interface PeerLimit {
  peer: PeerRef;
  bytesPerSecond: number;
}

/** Per-peer speed limits over tc (src/kernel/shaper/). Limits are keyed by tunnel address. */
export interface ShaperApi {
  /**
   * Creates or repairs the shared qdiscs, IFB and hash tables, and reconciles the limits with
   * the live peers: anything for an address that is not in `live` is removed; a limit that
   * holds in one direction only is restored in the other for a live address. Returns what was
   * repaired (empty when all was in order or on a first set-up).
   */
  ensure(ifname: string, live: readonly PeerRef[]): Promise<Repair[]>;
  /** Limits download and upload of the peer to bytesPerSecond each; replaces an earlier limit. */
  setLimit(ifname: string, peer: PeerRef, bytesPerSecond: number): Promise<void>;
  /** Sets many limits at once (a restore at start), in few datagrams. */
  setLimits(ifname: string, limits: readonly PeerLimit[]): Promise<void>;
  /**
   * Removes the peer's limit in both directions; a peer without one is not an error. A
   * dual-stack peer's IPv6 address names its IPv6 filters, removed first.
   */
  removeLimit(ifname: string, address: string, address6?: string): Promise<void>;
  /** address → what holds in each direction, read back from both devices. */
  listLimits(ifname: string): Promise<Map<string, LimitState>>;
}

export interface DataCap {
  quotaBytes: number;
  usedBytes: number;
  /** The cap's billing period (issue 19), kept in the quota object's userdata; null: none. */
  plan?: CapPlan | null;
  /** Bytes per second once the cap is used up (afterCap "throttle"); absent or null: blocked. */
  throttleBytesPerSecond?: number | null;
}

/** A billing period's length (DESIGN §3 "Plans on a data cap"). */
export type Period = 'day' | 'week' | 'month';

/** A cap's billing period: usage resets at periodStart + k periods (src/peers/periods.ts). */
export interface CapPlan {
  period: Period;
  /** The anchor: milliseconds since the epoch, and the wall clock's offset periods count on. */
  periodStart: { at: number; offsetMinutes: number };
  /** Milliseconds since the epoch when the count of the current period began (its last reset). */
  periodFrom: number;
  /** Bytes the last period reset closed with; null before the first. */
  previousUsedBytes: number | null;
}

/** A period reset made: the usage it closed, and the plan as it now stands. */
export interface PeriodReset {
  closing: DataCap;
  plan: CapPlan;
}

/** What happens over the cap: null blocks, a rate throttles to it (bytes per second). */
export interface AfterCap {
  throttleBytesPerSecond: number | null;
}

/** A cap as read from the kernel. */
export interface KernelDataCap extends DataCap {
  /** false: the quota object exists but no map element leads packets to it. */
  enforced: boolean;
  /** A throttling cap that is used up: the peer is slowed to its rate now. */
  throttled?: boolean;
}

/** A live peer with the cap the daemon last saw for it, the only source once the table is gone. */
export interface CapRef extends PeerRef {
  lastSeen?: DataCap;
}

/** Per-peer data caps over nf_tables (src/kernel/quota/). Caps are keyed by tunnel address. */
export interface QuotaApi {
  /**
   * Creates or repairs the daemon's table, chains, map and rules, and reconciles the caps with
   * the live peers: an object or element for an address not in `live`, or owned by another
   * public key, is removed; a live peer's object gets its map element; a cap of a live peer
   * that the kernel lost (table or object gone) is restored from `lastSeen`. Returns what was
   * repaired.
   */
  ensure(ifname: string, live: readonly CapRef[]): Promise<Repair[]>;
  /**
   * A dual-stack interface (issue 18) keeps its caps in an inet table where a peer's IPv6
   * address leads to the same quota object as its IPv4 one; an IPv4-only one in an ip table,
   * as before. Set once at start, before any other call for the interface; caps an ip table
   * holds for an interface that became dual-stack move to its inet table then (returned as
   * repairs, to log).
   */
  setDualStack(ifname: string, dualStack: boolean): Promise<Repair[]>;
  /**
   * Sets or changes the cap; changing keeps the bytes already used. `plan` undefined keeps the
   * cap's billing period as it is; a plan or null sets or ends it (the object is replaced with
   * its new userdata, keeping consumed). `afterCap` undefined keeps what the cap does over it
   * (a new cap blocks).
   */
  setCap(
    ifname: string,
    peer: PeerRef,
    quotaBytes: number,
    plan?: CapPlan | null,
    afterCap?: AfterCap,
  ): Promise<void>;
  /** The peer's cap as the kernel holds it (with its plan); null when it has none of its own. */
  getCap(ifname: string, peer: PeerRef): Promise<DataCap | null>;
  /** Removes the peer's cap (and a dual-stack peer's IPv6 element); none is not an error. */
  removeCap(ifname: string, address: string, address6?: string): Promise<void>;
  /**
   * Zeroes the usage of the peer's cap now, read and reset in one step (NFT_MSG_GETOBJ_RESET):
   * the closing cap and usage (bytes let through); null when the peer has no cap.
   */
  resetCap(ifname: string, peer: PeerRef): Promise<DataCap | null>;
  /**
   * The period reset due at `due` (ms): read and zero the quota in one step, then record the
   * closing usage as the previous period's and `due` as the new period's start in the userdata.
   * null when the peer's cap has no plan or the reset was already made (periodFrom >= due).
   */
  resetPeriod(ifname: string, peer: PeerRef, due: number): Promise<PeriodReset | null>;
  /** address → cap, bytes used and whether it is enforced, read back from the kernel. */
  listCaps(ifname: string): Promise<Map<string, KernelDataCap>>;
}

/**
 * Suspended peers over nf_tables (src/kernel/suspension/), keyed by tunnel address, each owned
 * by its peer's public key.
 */
export interface SuspensionApi {
  /**
   * Repairs the table (rebuilt whole when not as specified), removes suspensions of addresses
   * whose live peer is not their owner, and adds `restore` (a reboot with a state dir). No table
   * and nothing to restore: nothing is made. The IPv6 address of each peer left suspended (a
   * live or restored ref's `address6`) is suspended too, and no other IPv6 address (issue 18).
   * Returns what was repaired.
   */
  ensure(ifname: string, live: readonly PeerRef[], restore?: readonly PeerRef[]): Promise<Repair[]>;
  /**
   * From the commit on, no tunnelled packet of the peer passes either way, of either family
   * when it has an `address6`; idempotent.
   */
  suspend(ifname: string, peer: PeerRef): Promise<void>;
  /**
   * Lets the address's packets pass again, and those of `address6` (a dual-stack peer's) in the
   * same transaction; an address not suspended is not an error.
   */
  resume(ifname: string, address: string, address6?: string | null): Promise<void>;
  /** Suspended address → the owner's public key (null when the element has none). */
  listSuspended(ifname: string): Promise<Map<string, string | null>>;
}

/** A peer's name as the kernel keeps it (issue 31): its address, its owner's key, the name. */
export interface NamedPeer {
  address: string;
  publicKey: string;
  name: string;
}

/**
 * Peer names over nf_tables (src/kernel/names/), one set element per named peer keyed by its
 * IPv4 tunnel address and owned by its public key, so a restart without a state dir keeps them.
 */
export interface NamesApi {
  /** Every name the set holds (elements not written by wg-peerd left out). */
  listNames(ifname: string): Promise<NamedPeer[]>;
  /**
   * Sets, changes (the element replaced in the same transaction) or, with null, clears each
   * peer's name; the table is made with the first name. An unchanged name writes nothing.
   */
  setNames(
    ifname: string,
    names: ReadonlyArray<{ peer: PeerRef; name: string | null }>,
  ): Promise<void>;
  /** Removes the names held at these addresses (a delete's clean-up); none is not an error. */
  removeNames(ifname: string, addresses: readonly string[]): Promise<void>;
  /**
   * Removes every element not owned by the live peer at its address; given `wanted` (public
   * key → name, a state directory's), makes each live peer's element carry exactly that name.
   * Answers the names now held (public key → name) and what was repaired.
   */
  ensure(
    ifname: string,
    live: readonly PeerRef[],
    wanted?: ReadonlyMap<string, string>,
  ): Promise<{ names: Map<string, string>; repairs: Repair[] }>;
}

/** A peer's expiry as the kernel keeps it (issue 31): address, owner, instant (ms since epoch). */
export interface PeerExpiry {
  address: string;
  publicKey: string;
  expiresAt: number;
}

/**
 * Peer expiry over nf_tables (src/kernel/expiry/): a set of the peers with an expiry and a set
 * of those whose expiry has not passed (elements with a timeout); the kernel drops the packets
 * of a peer in the first and not the second, whether or not the daemon runs.
 */
export interface ExpiryApi {
  /** Every expiry the `expiring` set holds (elements not written by wg-peerd left out). */
  listExpiries(ifname: string): Promise<PeerExpiry[]>;
  /**
   * The IPv4 addresses whose element in `valid` has not ended: their expiry has not passed;
   * null when the set is missing (the table was flushed): the kernel cannot say.
   */
  listValid(ifname: string): Promise<Set<string> | null>;
  /**
   * Sets or renews (the elements replaced, the timeout `expiresAt - now`) or, with null, clears
   * the peer's expiry, of its IPv6 address too, in one transaction; idempotent.
   */
  setExpiry(ifname: string, peer: PeerRef, expiresAt: number | null): Promise<void>;
  /** Removes the expiries at these peers' addresses (a delete's clean-up); none is no error. */
  removeExpiries(
    ifname: string,
    refs: ReadonlyArray<Pick<PeerRef, 'address' | 'address6'>>,
  ): Promise<void>;
  /**
   * Makes the tables hold exactly the expiries wanted (public key → instant) of these live
   * peers, each with its remaining time; a passed one is expired at once.
   */
  ensure(
    ifname: string,
    live: readonly PeerRef[],
    wanted: ReadonlyMap<string, number>,
  ): Promise<void>;
}

/**
 * The kernel layer's one change queue (a SerialQueue, src/netlink/serial-queue.ts): every change
 * to the kernel runs through it, one at a time in arrival order; work queued from inside a
 * running change runs at once (re-entrant).
 */
export interface ChangeQueue {
  run<T>(task: () => Promise<T>): Promise<T>;
}

/** Cheap reads for the readiness probe (src/kernel/probe.ts); none of them reads peers. */
export interface ProbeApi {
  /** Looks the generic netlink family up; NetlinkError ENOENT when it is not registered. */
  genlFamily(name: string): Promise<void>;
  /** The qdiscs on the device (RTM_GETQDISC): tc answers. */
  qdiscCount(ifindex: number): Promise<number>;
  /** The nf_tables ruleset generation (NFT_MSG_GETGEN): nf_tables answers. */
  nftGeneration(): Promise<number>;
}

/** Every kernel facility the daemon uses, over netlink sockets it owns. */
export interface Kernel {
  /** Where every change to the kernel is serialized (the service's changes included). */
  changes: ChangeQueue;
  wireguard: WireGuardApi;
  link: LinkApi;
  shaper: ShaperApi;
  quota: QuotaApi;
  suspension: SuspensionApi;
  /** Peer names (issue 31). */
  names: NamesApi;
  /** Peer expiry (issue 31). */
  expiry: ExpiryApi;
  probe: ProbeApi;
  /** Closes every netlink socket. */
  close(): void;
}
