/**
 * PeerService: the domain of wg-peerd. Lists, creates and deletes the peers of one WireGuard
 * interface and sets or removes their speed limits and data caps. The kernel is the only store;
 * every answer is read from it.
 */
import type {
  CapPlan,
  CapRef,
  DataCap,
  IpPrefix,
  Ipv6Address,
  Kernel,
  KernelDataCap,
  PeerRef,
  Repair,
  WireGuardDevice,
  WireGuardPeer,
} from '../kernel/types';
import { allocateAddress, allocateAddress6 } from './allocator';
import { DUAL_STACK_CLIENT_ALLOWED_IPS, formatEndpoint, renderClientConfig } from './client-config';
import {
  CleanupFailedError,
  DomainError,
  EndpointUnknownError,
  InterfaceNotReadyError,
  InterfaceNotWireGuardError,
  NoDataCapError,
  PeerNotFoundError,
  PeerWithoutAddressError,
  PoolExhaustedError,
  StateWriteError,
  isFacilityAbsent,
  translateKernelError,
  type Facility,
} from './errors';
import { networkCidr } from '../kernel/ipv4';
import { networkCidr6 } from '../kernel/ipv6';
import { generateKeyPair, parsePublicKey, type RandomSource } from './keys';
import { FreshRead } from './fresh-read';
import { UsageFence } from './usage-fence';
import type { ListReads } from './checkpoint';
import { allInOrder } from './settled';
import type { UsageRead, KernelObserver, PeerSnapshot } from './snapshot';
import { limitOf, tunnelAddress6Of, tunnelAddressOf } from './view';
import type { PeerChangeSink } from './event-sink';
import type { ExhaustionTimes } from './exhaustion-times';
import type { SavedPeer, StateStore } from '../state';
import {
  type DataCapChange,
  capToKeep,
  checkCapChange,
  checkInteger,
  resolveCapChange,
} from './cap-plan';
import { PeriodScheduler, type SchedulerClock, systemClock } from './period-scheduler';
import { formatPeriodStart } from './periods';

/**
 * The state directory as the service writes it (src/state/store.ts): every record resolves once
 * it is on disk. A create saves its intent before the kernel change and its commit after it; every
 * other change saves its record before the kernel change, and an undoing record if the kernel
 * refuses it. See `PeerService.durable`.
 */
export type PeerJournal = Pick<
  StateStore,
  | 'state'
  | 'intendCreates'
  | 'commitCreates'
  | 'abortCreates'
  | 'recordDelete'
  | 'recordLimit'
  | 'recordCap'
  | 'recordSuspension'
  | 'recordPeers'
>;

/** A period reset made this long after it fell due was missed (the daemon was down): warn. */
const PERIOD_RESET_LATE_MS = 10_000;

function isoStart(plan: CapPlan): string {
  return formatPeriodStart(plan.periodStart);
}

/** DESIGN §3: speed limit range in bytes per second, each direction. */
export const SPEED_LIMIT_MIN = 1_000;
export const SPEED_LIMIT_MAX = 1_000_000_000_000;
/** DESIGN §3: data cap range in bytes, both directions together. */
export const DATA_CAP_MIN = 1;
export const DATA_CAP_MAX = Number.MAX_SAFE_INTEGER;

/** The slice of a logger the service writes kernel changes to (pino's Logger fits). */
export interface EventLogger {
  info(object: Record<string, unknown>, message: string): void;
  warn(object: Record<string, unknown>, message: string): void;
  error(object: Record<string, unknown>, message: string): void;
}

export interface CreatedPeer {
  ip: string;
  /** The peer's IPv6 address on a dual-stack interface; null on an IPv4-only one. */
  ipv6: string | null;
  privateKey: string;
  publicKey: string;
  serverPublicKey: string;
  endpoint: string;
  /** What the client config routes through the tunnel: the subnet, or everything (dual-stack). */
  clientAllowedIps: string;
  /** Ready wg-quick configuration for the client. */
  clientConfig: string;
}

/** What a create decided before the kernel change. */
interface CreatePlan {
  ip: string;
  ip6: string | null;
  keys: { publicKey: string; privateKey: string };
  serverPublicKey: string;
  endpoint: string;
  clientAllowedIps: string;
}

interface CreateWaiter {
  resolve: (created: CreatedPeer) => void;
  reject: (error: unknown) => void;
}

/** The allowed IPs a new peer gets: `<ip>/32`, and `<ip6>/128` on a dual-stack interface. */
function allowedIpsOf(plan: Pick<CreatePlan, 'ip' | 'ip6'>): IpPrefix[] {
  const v4: IpPrefix = { family: 4, address: plan.ip, cidr: 32 };
  return plan.ip6 === null ? [v4] : [v4, { family: 6, address: plan.ip6, cidr: 128 }];
}

const cidrTexts = (prefixes: readonly IpPrefix[]): string[] =>
  prefixes.map((p) => `${p.address}/${p.cidr}`);

function planned(outcome: CreatePlan | PoolExhaustedError): CreatePlan {
  if (outcome instanceof Error) throw outcome;
  return outcome;
}

/** A peer as the result of a change names it. */
export interface ChangedPeer {
  publicKey: string;
  ip: string | null;
}

/** What the HTTP layer needs from the domain. */
export interface PeerServiceApi {
  /** The shared kernel read behind the list and the metrics (DESIGN §5). */
  snapshot(): Promise<PeerSnapshot>;
  /** The snapshot snapshot() would answer at once (inside the window), or null. */
  freshSnapshot(): PeerSnapshot | null;
  createPeer(): Promise<CreatedPeer>;
  deletePeer(publicKey: string): Promise<ChangedPeer>;
  setSpeedLimit(publicKey: string, bytesPerSecond: number): Promise<ChangedPeer>;
  removeSpeedLimit(publicKey: string): Promise<ChangedPeer>;
  /** A number: `{ quotaBytes }`. Fields left out keep their value (./cap-plan.ts). */
  setDataCap(publicKey: string, change: number | DataCapChange): Promise<ChangedPeer>;
  removeDataCap(publicKey: string): Promise<ChangedPeer>;
  setSuspension(publicKey: string, suspended: boolean): Promise<ChangedPeer>;
  resetDataCap(publicKey: string): Promise<ResetCap>;
}

/** A cap reset: the peer and the usage the reset closed (bytes let through, at most the cap). */
export interface ResetCap extends ChangedPeer {
  usedBytes: number;
}

export interface PeerServiceOptions {
  kernel: Pick<Kernel, 'changes' | 'wireguard' | 'link' | 'shaper' | 'quota' | 'suspension'>;
  interfaceName: string;
  /** Host part of `server.endpoint`; null: the host's primary IPv4 address, asked per create. */
  endpointHost?: string | null;
  logger: EventLogger;
  /** Milliseconds since the epoch; injectable for tests. */
  now?: () => number;
  random?: RandomSource;
  /** Told of every snapshot read and kernel failure (the daemon's metrics). */
  observer?: KernelObserver;
  /**
   * DESIGN §5 freshness window: for this many milliseconds after a snapshot read completed,
   * snapshot() answers from it; every change ends the window. 0 (the default here; the daemon's
   * own default is config's 1000) shares only reads in flight.
   */
  listMaxAgeMs?: number;
  /** Monotonic millisecond clock of the window; injectable for tests. */
  monotonicNow?: () => number;
  /** Told of each change as it is made, beside its log line (src/events). */
  events?: PeerChangeSink;
  /** The state directory (`--state-dir`); null or absent: nothing is kept (SPEC.md). */
  journal?: PeerJournal | null;
  /**
   * Settles once the saved state is back in the kernel (a start with --state-dir): lists and
   * changes wait for it, so nobody sees a half-restored list.
   */
  ready?: Promise<unknown>;
  /**
   * The interface's global or unique-local IPv6 addresses as found or made at start (DESIGN §3,
   * issue 18): the first one's prefix is the pool each new peer also gets a /128 from, and none
   * of them is given out. Empty or absent: IPv4 only, as before.
   */
  addresses6?: readonly Ipv6Address[];
  /** The billing periods' clock (src/peers/period-scheduler.ts); injectable for tests. */
  periodClock?: SchedulerClock;
  /** Told of each billing-period reset made (the daemon's metrics). */
  onPeriodReset?: () => void;
  /** When caps ran out (the list's exhausted_at), told of every fresh read; none: unknown. */
  exhaustion?: ExhaustionTimes;
  /**
   * Shared with the usage checkpoints (./checkpoint.ts): every read of the caps takes its token,
   * every change to a cap runs inside it. Absent: one of the service's own.
   */
  usageFence?: UsageFence;
}

function hostAddressesOf(peer: WireGuardPeer): string[] {
  return peer.allowedIps.filter((p) => p.family === 4 && p.cidr === 32).map((p) => p.address);
}

/**
 * The peer as the shaper and the quota key it: its IPv4 tunnel address, and on a dual-stack
 * interface (`dualStack`) a peer's IPv6 one (issue 18), which its limit and cap cover too. An
 * IPv4-only interface keys on IPv4 alone, whatever allowed IPs other tools gave a peer.
 */
function refOf(peer: WireGuardPeer, address: string, dualStack: boolean): PeerRef {
  const address6 = dualStack ? tunnelAddress6Of(peer) : null;
  return address6 === null
    ? { address, publicKey: peer.publicKey }
    : { address, address6, publicKey: peer.publicKey };
}

/** The caps a snapshot was read with, for a usage checkpoint. */
function usageOf(snapshot: PeerSnapshot): UsageRead {
  if (snapshot.usage === undefined) throw new Error('the read kept no caps');
  return snapshot.usage;
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** What a facility's repair log line says it repaired. */
const REPAIRED = { shaper: 'speed limits', quota: 'data caps', suspension: 'suspensions' } as const;

export class PeerService implements PeerServiceApi {
  private readonly kernel: PeerServiceOptions['kernel'];
  private readonly ifname: string;
  private readonly endpointHost: string | null;
  private readonly log: EventLogger;
  private readonly now: () => number;
  private readonly random: RandomSource | undefined;
  private readonly snapshots: FreshRead<PeerSnapshot>;
  private readonly fence: UsageFence;
  private readonly observer: KernelObserver | undefined;
  /**
   * The caps the daemon last saw, per tunnel address with the owner's key. The kernel stays the
   * store of record; this memory is only what a cap lost with the nft table is listed as
   * (enforced: false) and restored from on the next write.
   */
  private readonly lastCaps = new Map<string, { publicKey: string; cap: DataCap }>();
  /** What the last snapshot showed lost behind the daemon's back: the next write repairs it. */
  private damage = { shaper: false, quota: false };
  /** The losses last logged, so that polling the list logs each loss once. */
  private lastLosses = '';
  /** The interface's ifindex when last read: another one means it was deleted and recreated. */
  private lastIfindex: number | undefined;
  private readonly events: PeerChangeSink | undefined;
  private readonly journal: PeerJournal | null;
  /** Addresses (both families) of creates between their saved intent and the kernel change. */
  private readonly reserved = new Set<string>();
  private readonly addresses6: readonly Ipv6Address[];
  /** The interface had an IPv6 address at start: limits and caps cover peers' IPv6 too. */
  private readonly dualStack: boolean;
  /** Creates waiting for the next batch (with a state directory); null when none is forming. */
  private forming: CreateWaiter[] | null = null;
  private readonly ready: Promise<unknown>;
  /** Billing-period resets (issue 19): one scheduler, fed the plans the kernel holds. */
  private readonly periods: PeriodScheduler;
  private readonly onPeriodReset: (() => void) | undefined;
  private readonly exhaustion: ExhaustionTimes | undefined;

  constructor(options: PeerServiceOptions) {
    this.kernel = options.kernel;
    this.ifname = options.interfaceName;
    this.endpointHost = options.endpointHost ?? null;
    this.log = options.logger;
    this.now = options.now ?? Date.now;
    this.random = options.random;
    this.observer = options.observer;
    this.events = options.events;
    this.journal = options.journal ?? null;
    this.ready = options.ready ?? Promise.resolve();
    this.addresses6 = options.addresses6 ?? [];
    this.dualStack = this.addresses6.length > 0;
    this.onPeriodReset = options.onPeriodReset;
    this.exhaustion = options.exhaustion;
    this.fence = options.usageFence ?? new UsageFence();
    this.periods = new PeriodScheduler({
      clock: options.periodClock ?? { ...systemClock, now: this.now },
      reset: (key, due) => this.resetPeriod(key, due),
      failed: (key, due, error) =>
        this.log.error(
          {
            event: 'data_cap_period_reset_failed',
            interface: this.ifname,
            publicKey: key,
            due: new Date(due).toISOString(),
            error: messageOf(error),
          },
          `the billing-period reset due at ${new Date(due).toISOString()} failed; retried in 10 s`,
        ),
    });
    this.snapshots = new FreshRead(
      async () => {
        await this.ready;
        return this.readSnapshot();
      },
      options.listMaxAgeMs ?? 0,
      options.monotonicNow ?? performance.now.bind(performance),
    );
  }

  snapshot(): Promise<PeerSnapshot> {
    return this.snapshots.get();
  }

  freshSnapshot(): PeerSnapshot | null {
    return this.snapshots.peek();
  }

  /**
   * The list's kernel reads as usage checkpoints ride on them (./checkpoint.ts): the caps of the
   * read at hand or of the next one to start, never a read of their own.
   */
  readonly listReads: ListReads = {
    atHand: () => this.snapshots.atHand()?.then(usageOf) ?? null,
    next: () => this.snapshots.next().then(usageOf),
    sinceLastRead: () => this.snapshots.sinceLastRead(),
  };

  async createPeer(): Promise<CreatedPeer> {
    const journal = this.journal;
    if (journal === null) {
      return this.change(async () => this.addPeer(planned((await this.planCreates(1))[0])));
    }
    return new Promise<CreatedPeer>((resolve, reject) => {
      const waiter = { resolve, reject };
      if (this.forming !== null) {
        this.forming.push(waiter);
        return;
      }
      this.forming = [waiter];
      void this.createBatch(journal);
    });
  }

  /**
   * Creates with a state directory, in batches: every create that arrived while the change queue
   * was busy joins one batch, planned from one read of the interface (one address each, never
   * shared), its intents saved in one disk flush, added to the kernel in one WireGuard call, and
   * its commits saved in one more flush. So fifty concurrent creates cost two flushes and one
   * dump, not a hundred flushes in a row; a single create costs the same as before plus two
   * flushes. A peer is answered only once its commit is on disk; one whose commit could not be
   * saved is removed from the kernel again (nobody could ever use it).
   */
  private async createBatch(journal: PeerJournal): Promise<void> {
    let batch: CreateWaiter[] = [];
    const take = (): CreateWaiter[] => {
      batch = this.forming ?? [];
      this.forming = null;
      return batch;
    };
    let plans: CreatePlan[] = [];
    try {
      const outcomes = await this.change(async () => this.planCreates(take().length));
      outcomes.forEach((outcome, i) => {
        if (outcome instanceof Error) batch[i].reject(outcome);
      });
      const waiters = batch.filter((_, i) => !(outcomes[i] instanceof Error));
      plans = outcomes.filter((o): o is CreatePlan => !(o instanceof Error));
      batch = waiters;
      if (plans.length === 0) return;
      const records = plans.map((p) => ({
        publicKey: p.keys.publicKey,
        allowedIps: cidrTexts(allowedIpsOf(p)),
      }));
      await this.durable(journal.intendCreates(records), 'nothing was created');
      let created: CreatedPeer[];
      try {
        created = await this.change(() => this.addPeers(plans));
      } catch (error) {
        await journal.abortCreates(plans.map((p) => p.keys.publicKey)).catch(() => undefined);
        throw error;
      } finally {
        this.release(plans);
      }
      try {
        await journal.commitCreates(records);
      } catch (error) {
        // Undo the kernel change: a peer nobody can be told about must not hold an address.
        const keys = plans.map((p) => p.keys.publicKey);
        const undone = await this.change(() =>
          this.call('wireguard', () => this.kernel.wireguard.removePeers(this.ifname, keys)),
        ).then(
          () => 'the peer was removed again',
          () => 'removing the peer again failed too: the next start removes it',
        );
        throw this.notSaved(error, undone);
      }
      created.forEach((peer, i) => batch[i].resolve(peer));
    } catch (error) {
      if (this.forming !== null && batch.length === 0) take();
      for (const waiter of batch) waiter.reject(error);
    } finally {
      this.release(plans);
    }
  }

  /** Gives the addresses of these creates back to the pool's reservations. */
  private release(plans: readonly CreatePlan[]): void {
    for (const plan of plans) {
      this.reserved.delete(plan.ip);
      if (plan.ip6 !== null) this.reserved.delete(plan.ip6);
    }
  }

  /**
   * Checks the interface, then chooses an address, keys and the endpoint for each of `count`
   * creates from one read of it: a PoolExhaustedError for a create that found no address left.
   * With a state directory the addresses stay reserved until the kernel has the peers.
   */
  private async planCreates(count: number): Promise<(CreatePlan | PoolExhaustedError)[]> {
    const link = await this.call('link', () => this.kernel.link.getLink(this.ifname));
    if (link.kind !== 'wireguard') throw new InterfaceNotWireGuardError(this.ifname, link.kind);
    const [addresses, device] = await allInOrder([
      this.call('link', () => this.kernel.link.getIpv4Addresses(link.index)),
      this.readDevice(),
    ]);
    const subnet = addresses[0];
    if (subnet === undefined) throw new InterfaceNotReadyError(this.ifname, 'address');
    const serverPublicKey = device.publicKey;
    if (serverPublicKey === null) throw new InterfaceNotReadyError(this.ifname, 'key');
    const prefix6 = this.addresses6[0] ?? null;
    const clientAllowedIps =
      prefix6 === null
        ? networkCidr(subnet.address, subnet.prefixLength)
        : DUAL_STACK_CLIENT_ALLOWED_IPS;
    const taken = device.peers.flatMap((p) => p.allowedIps);
    // Both families' reservations, as allowed IPs: each allocation reads its own family.
    const reserved: IpPrefix[] = [...this.reserved].map((address) =>
      address.includes(':') ? { family: 6, address, cidr: 128 } : { family: 4, address, cidr: 32 },
    );
    const plans: (CreatePlan | PoolExhaustedError)[] = [];
    let endpoint: string | null = null;
    for (let i = 0; i < count; i++) {
      const allowedIps = [...taken, ...reserved];
      const ip = allocateAddress({ subnet, serverAddresses: addresses, allowedIps });
      if (ip === null) {
        plans.push(
          new PoolExhaustedError(this.ifname, networkCidr(subnet.address, subnet.prefixLength)),
        );
        continue;
      }
      let ip6: string | null = null;
      if (prefix6 !== null) {
        // Chosen with the IPv4 address, in the same change: concurrent creates share neither.
        ip6 = allocateAddress6({ prefix: prefix6, serverAddresses: this.addresses6, allowedIps });
        if (ip6 === null) {
          const pool = networkCidr6(prefix6.address, prefix6.prefixLength);
          plans.push(new PoolExhaustedError(this.ifname, pool));
          continue;
        }
      }
      const plan = { ip, ip6 };
      reserved.push(...allowedIpsOf(plan));
      endpoint ??= formatEndpoint(await this.serverHost(), device.listenPort);
      const keys = generateKeyPair(this.random);
      if (this.journal !== null) {
        this.reserved.add(ip);
        if (ip6 !== null) this.reserved.add(ip6);
      }
      plans.push({ ...plan, keys, serverPublicKey, endpoint, clientAllowedIps });
    }
    return plans;
  }

  private async addPeer(plan: CreatePlan): Promise<CreatedPeer> {
    return (await this.addPeers([plan]))[0];
  }

  private async addPeers(plans: readonly CreatePlan[]): Promise<CreatedPeer[]> {
    // A limit or cap left behind for these addresses (a delete whose clean-up failed) must not
    // fall to the new peers.
    await this.removeLimitsAndCaps(
      plans.map((p) => (p.ip6 === null ? { address: p.ip } : { address: p.ip, address6: p.ip6 })),
    );
    await this.call('wireguard', () =>
      this.kernel.wireguard.addPeers(
        this.ifname,
        plans.map((plan) => ({ publicKey: plan.keys.publicKey, allowedIps: allowedIpsOf(plan) })),
      ),
    );
    return plans.map(({ ip, ip6, keys, serverPublicKey, endpoint, clientAllowedIps }) => {
      this.log.info(
        {
          event: 'peer_created',
          interface: this.ifname,
          publicKey: keys.publicKey,
          ip,
          ...(ip6 === null ? {} : { ipv6: ip6 }),
        },
        'peer created',
      );
      this.events?.publish({ type: 'peer.created', publicKey: keys.publicKey, ipAddress: ip });
      return {
        ip,
        ipv6: ip6,
        privateKey: keys.privateKey,
        publicKey: keys.publicKey,
        serverPublicKey,
        endpoint,
        clientAllowedIps,
        clientConfig: renderClientConfig({
          privateKey: keys.privateKey,
          address: ip,
          address6: ip6,
          serverPublicKey,
          endpoint,
          allowedIps: clientAllowedIps,
        }),
      };
    });
  }

  async deletePeer(publicKey: string): Promise<ChangedPeer> {
    const key = parsePublicKey(publicKey);
    const before = this.saved(key);
    return this.capChange(
      key,
      (journal) => journal.recordDelete(key),
      (journal) => (before ? journal.recordPeers([before]) : Promise.resolve()),
      // A peer already gone, or gone with only its clean-up failed, is deleted: nothing to undo.
      (error) => !(error instanceof PeerNotFoundError || error instanceof CleanupFailedError),
      async () => {
        const peer = await this.findPeer(key);
        await this.call('wireguard', () => this.kernel.wireguard.removePeers(this.ifname, [key]));
        const ip = tunnelAddressOf(peer);
        for (const address of hostAddressesOf(peer)) this.lastCaps.delete(address);
        this.periods.set(key, null);
        this.log.info(
          { event: 'peer_deleted', interface: this.ifname, publicKey: key, ip },
          'peer deleted',
        );
        this.events?.publish({ type: 'peer.deleted', publicKey: key, ipAddress: ip });
        try {
          await this.removeLimitsAndCaps(
            hostAddressesOf(peer).map((address) =>
              address === ip ? refOf(peer, address, this.dualStack) : { address },
            ),
          );
        } catch (error) {
          this.log.error(
            { event: 'peer_cleanup_failed', interface: this.ifname, publicKey: key, ip },
            'peer deleted, but removing its speed limit or data cap failed',
          );
          throw new CleanupFailedError(error);
        }
        return { publicKey: key, ip };
      },
    );
  }

  async setSpeedLimit(publicKey: string, bytesPerSecond: number): Promise<ChangedPeer> {
    const key = parsePublicKey(publicKey);
    checkInteger(bytesPerSecond, SPEED_LIMIT_MIN, SPEED_LIMIT_MAX, 'bytesPerSecond');
    const before = this.saved(key)?.limit ?? null;
    return this.recorded(
      (journal) => journal.recordLimit(key, bytesPerSecond),
      (journal) => journal.recordLimit(key, before),
      () => true,
      async () => {
        const device = await this.readDevice();
        const ref = this.refIn(device, key, 'speed limit');
        const ip = ref.address;
        await this.repair('shaper', device);
        await this.call('shaper', () =>
          this.kernel.shaper.setLimit(this.ifname, ref, bytesPerSecond),
        );
        this.log.info(
          { event: 'speed_limit_set', interface: this.ifname, publicKey: key, ip, bytesPerSecond },
          'speed limit set',
        );
        this.changed('peer.limit_changed', key, ip, { bytes_per_second: bytesPerSecond });
        return { publicKey: key, ip };
      },
    );
  }

  async removeSpeedLimit(publicKey: string): Promise<ChangedPeer> {
    const key = parsePublicKey(publicKey);
    const before = this.saved(key)?.limit ?? null;
    return this.recorded(
      (journal) => journal.recordLimit(key, null),
      (journal) => journal.recordLimit(key, before),
      () => true,
      async () => {
        const ref = await this.refFor(key, 'speed limit');
        const ip = ref.address;
        await this.call('shaper', () => this.removeLimitOf(ref));
        this.log.info(
          { event: 'speed_limit_removed', interface: this.ifname, publicKey: key, ip },
          'speed limit removed',
        );
        this.changed('peer.limit_changed', key, ip, { bytes_per_second: null });
        return { publicKey: key, ip };
      },
    );
  }

  async setDataCap(publicKey: string, change: number | DataCapChange): Promise<ChangedPeer> {
    const key = parsePublicKey(publicKey);
    const asked = typeof change === 'number' ? { quotaBytes: change } : change;
    if (asked.quotaBytes !== undefined) {
      checkInteger(asked.quotaBytes, DATA_CAP_MIN, DATA_CAP_MAX, 'quotaBytes');
    }
    checkCapChange(asked);
    const { quotaBytes, plan, afterCap } =
      asked.quotaBytes !== undefined && Object.keys(asked).every((field) => field === 'quotaBytes')
        ? { quotaBytes: asked.quotaBytes, plan: undefined, afterCap: undefined } // the cap alone
        : // What a left-out field keeps comes from the kernel's cap (a read, nothing written).
          await this.change(async () => {
            const ref = this.refIn(await this.readDevice(), key, 'data cap');
            const existing = await this.call('quota', () =>
              this.kernel.quota.getCap(this.ifname, ref),
            );
            return resolveCapChange(existing, asked, this.now());
          });
    const before = this.saved(key)?.cap ?? null;
    // A field left out keeps its value: the rate the daemon knows for this peer's cap.
    const known = (peerCap: DataCap | null | undefined): number | null =>
      afterCap !== undefined
        ? afterCap.throttleBytesPerSecond
        : (peerCap?.throttleBytesPerSecond ?? null);
    return this.capChange(
      key,
      // The bytes counted stay as saved; the kernel keeps its own count across the change.
      (journal) =>
        journal.recordCap(
          key,
          capToKeep({
            quotaBytes,
            usedBytes: before?.usedBytes ?? 0,
            plan: plan === undefined ? before?.plan : plan,
            throttleBytesPerSecond: known(before),
          }),
        ),
      (journal) => journal.recordCap(key, before),
      () => true,
      async () => {
        const device = await this.readDevice();
        const ref = this.refIn(device, key, 'data cap');
        const ip = ref.address;
        await this.repair('quota', device);
        await this.call('quota', () =>
          this.kernel.quota.setCap(this.ifname, ref, quotaBytes, plan, afterCap),
        );
        const seen = this.lastCaps.get(ip);
        const mine = seen?.publicKey === key ? seen.cap : null;
        const throttleBytesPerSecond = known(mine);
        const held = plan === undefined ? (mine?.plan ?? null) : plan;
        this.lastCaps.set(ip, {
          publicKey: key,
          cap: capToKeep({
            quotaBytes,
            usedBytes: mine?.usedBytes ?? 0,
            plan: held,
            throttleBytesPerSecond,
          }),
        });
        if (plan !== undefined) this.periods.set(key, plan);
        const shown = plan ? { period: plan.period, periodStart: isoStart(plan) } : {};
        const afterCapName = throttleBytesPerSecond === null ? 'block' : 'throttle';
        this.log.info(
          {
            event: 'data_cap_set',
            interface: this.ifname,
            publicKey: key,
            ip,
            quotaBytes,
            ...shown,
            afterCap: afterCapName,
            throttleBytesPerSecond,
          },
          'data cap set',
        );
        this.changed('peer.cap_changed', key, ip, {
          quota_bytes: quotaBytes,
          throttle_bytes_per_second: throttleBytesPerSecond,
        });
        return { publicKey: key, ip };
      },
    );
  }

  /**
   * Starts the billing periods: the plans the kernel holds now go to the scheduler, which makes
   * at once any reset that fell due while the daemon was not running (logged as made late).
   */
  async startPeriods(): Promise<void> {
    await this.ready;
    const caps = await this.optional('quota', () => this.kernel.quota.listCaps(this.ifname));
    if (![...caps.values()].some((cap) => cap.plan)) return;
    this.schedulePlans(await this.readDevice(), caps);
  }

  /** Stops the period scheduler (shutdown). */
  stopPeriods(): void {
    this.periods.stop();
  }

  /**
   * The billing-period reset due at `due` (the scheduler calls it): read and zero the quota in
   * one step, keep the closing usage as the previous period's, publish peer.cap_reset.
   */
  private async resetPeriod(key: string, due: number): Promise<void> {
    await this.changeOfCap(key, async () => {
      const device = await this.readDevice();
      const peer = device.peers.find((p) => p.publicKey === key);
      const ip = peer === undefined ? null : tunnelAddressOf(peer);
      if (ip === null) {
        this.periods.set(key, null);
        return;
      }
      const ref = refOf(peer!, ip, this.dualStack);
      const made = await this.call('quota', () =>
        this.kernel.quota.resetPeriod(this.ifname, ref, due),
      );
      if (made === null) {
        const held = await this.call('quota', () => this.kernel.quota.getCap(this.ifname, ref));
        this.periods.set(key, held?.plan ?? null);
        return;
      }
      const { closing, plan } = made;
      const rate = closing.throttleBytesPerSecond;
      const cap = capToKeep({ ...closing, usedBytes: 0, plan, throttleBytesPerSecond: rate });
      this.lastCaps.set(ip, { publicKey: key, cap });
      this.periods.set(key, plan);
      this.onPeriodReset?.();
      const lateMs = this.now() - due;
      const late = lateMs > PERIOD_RESET_LATE_MS;
      this.log[late ? 'warn' : 'info'](
        {
          event: 'data_cap_period_reset',
          interface: this.ifname,
          publicKey: key,
          ip,
          period: plan.period,
          due: new Date(due).toISOString(),
          ...closing,
          ...(late ? { lateMs } : {}),
        },
        late
          ? `billing-period reset due at ${new Date(due).toISOString()} made late (the daemon was not running then)`
          : 'billing-period reset made',
      );
      this.events?.publish({
        type: 'peer.cap_reset',
        publicKey: key,
        ipAddress: ip,
        details: {
          origin: 'period',
          quota_bytes: closing.quotaBytes,
          used_bytes: closing.usedBytes,
          period: plan.period,
          due: new Date(due).toISOString(),
        },
      });
      if (this.journal !== null) {
        await this.journal.recordCap(key, cap).catch((error: unknown) => {
          this.log.error(
            { event: 'state_write_failed', interface: this.ifname, error: messageOf(error) },
            `saving a billing-period reset in the state directory failed: ${messageOf(error)}`,
          );
        });
      }
    });
  }

  async removeDataCap(publicKey: string): Promise<ChangedPeer> {
    const key = parsePublicKey(publicKey);
    const before = this.saved(key)?.cap ?? null;
    return this.capChange(
      key,
      (journal) => journal.recordCap(key, null),
      (journal) => journal.recordCap(key, before),
      () => true,
      async () => {
        const ref = await this.refFor(key, 'data cap');
        const ip = ref.address;
        await this.call('quota', () => this.removeCapOf(ref));
        this.lastCaps.delete(ip);
        this.periods.set(key, null);
        this.log.info(
          { event: 'data_cap_removed', interface: this.ifname, publicKey: key, ip },
          'data cap removed',
        );
        this.changed('peer.cap_changed', key, ip, { quota_bytes: null });
        return { publicKey: key, ip };
      },
    );
  }

  /**
   * Suspends or resumes the peer in the kernel (src/kernel/suspension): key, addresses,
   * counters, limit and cap stay as they are. The suspension table is repaired against the live
   * peers first, so a suspension left by an earlier owner of the address never outlives it.
   */
  async setSuspension(publicKey: string, suspended: boolean): Promise<ChangedPeer> {
    const key = parsePublicKey(publicKey);
    const before = this.saved(key)?.suspended ?? false;
    return this.recorded(
      (journal) => journal.recordSuspension(key, suspended),
      (journal) => journal.recordSuspension(key, before),
      () => true,
      async () => {
        const device = await this.readDevice();
        const ref = this.refIn(device, key, 'suspension');
        const ip = ref.address;
        await this.repair('suspension', device);
        const suspension = this.kernel.suspension;
        await this.call('suspension', () =>
          suspended
            ? suspension.suspend(this.ifname, ref)
            : suspension.resume(this.ifname, ip, ref.address6),
        );
        const event = suspended ? 'peer_suspended' : 'peer_resumed';
        this.log.info(
          { event, interface: this.ifname, publicKey: key, ip },
          suspended ? 'peer suspended' : 'peer resumed',
        );
        this.events?.publish({
          type: suspended ? 'peer.suspended' : 'peer.resumed',
          publicKey: key,
          ipAddress: ip,
        });
        return { publicKey: key, ip };
      },
    );
  }

  /**
   * Zeroes the usage of the peer's cap now, in the kernel, read and reset in one step; answers
   * the closing usage. A peer without a cap is a 409 (NoDataCapError).
   */
  async resetDataCap(publicKey: string): Promise<ResetCap> {
    const key = parsePublicKey(publicKey);
    const before = this.saved(key)?.cap ?? null;
    return this.capChange(
      key,
      (journal) =>
        before === null ? Promise.resolve() : journal.recordCap(key, { ...before, usedBytes: 0 }),
      (journal) => journal.recordCap(key, before),
      () => true,
      async () => {
        const device = await this.readDevice();
        const ref = this.refIn(device, key, 'data cap');
        const ip = ref.address;
        await this.repair('quota', device);
        const closing = await this.call('quota', () =>
          this.kernel.quota.resetCap(this.ifname, { address: ip, publicKey: key }),
        );
        if (closing === null) throw new NoDataCapError();
        const kept = this.lastCaps.get(ip)?.cap;
        this.lastCaps.set(ip, {
          publicKey: key,
          cap: capToKeep({
            ...closing,
            usedBytes: 0,
            plan: kept?.plan,
            throttleBytesPerSecond: kept?.throttleBytesPerSecond,
          }),
        });
        this.log.info(
          { event: 'data_cap_reset', interface: this.ifname, publicKey: key, ip, ...closing },
          'data cap usage reset',
        );
        this.events?.publish({
          type: 'peer.cap_reset',
          publicKey: key,
          ipAddress: ip,
          details: { quota_bytes: closing.quotaBytes, used_bytes: closing.usedBytes },
        });
        return { publicKey: key, ip, usedBytes: closing.usedBytes };
      },
    );
  }

  private changed(
    type: 'peer.limit_changed' | 'peer.cap_changed',
    publicKey: string,
    ipAddress: string,
    details: Record<string, number | null>,
  ): void {
    this.events?.publish({ type, publicKey, ipAddress, details });
  }
  /** A copy of what the state directory holds for the peer (undefined without one). */
  private saved(publicKey: string): SavedPeer | undefined {
    const peer = this.journal?.state.peers.get(publicKey);
    return peer === undefined ? undefined : structuredClone(peer);
  }

  /**
   * A change, durable with a state directory: its record on disk first, then the kernel change
   * (so a full disk refuses the change before the kernel has any of it: 507); if the kernel then
   * refuses, the undoing record, so the journal never holds what the kernel refused. The disk wait
   * is outside the change queue: concurrent changes share one flush. Records and kernel changes
   * keep one order (the journal resolves appends in order, and each change is queued on resolve).
   * Without a state directory: the kernel change alone, exactly as before.
   */
  private async recorded<T>(
    record: (journal: PeerJournal) => Promise<void>,
    undo: (journal: PeerJournal) => Promise<void>,
    undoAfter: (error: unknown) => boolean,
    task: () => Promise<T>,
  ): Promise<T> {
    const journal = this.journal;
    if (journal === null) return this.change(task);
    await this.durable(record(journal), 'nothing was changed');
    try {
      return await this.change(task);
    } catch (error) {
      if (undoAfter(error)) {
        await undo(journal).catch((undoError: unknown) => {
          this.log.error(
            { event: 'state_undo_failed', interface: this.ifname, error: messageOf(undoError) },
            'the kernel refused a change, and saving its undoing in the state directory failed too',
          );
        });
      }
      throw error;
    }
  }

  /**
   * `recorded` for a change to a peer's cap or to the peer itself: inside the usage fence, so no
   * count read before it ends is saved over it (./usage-fence.ts).
   */
  private capChange<T>(
    key: string,
    record: (journal: PeerJournal) => Promise<void>,
    undo: (journal: PeerJournal) => Promise<void>,
    undoAfter: (error: unknown) => boolean,
    task: () => Promise<T>,
  ): Promise<T> {
    return this.fence.around(key, () => this.recorded(record, undo, undoAfter, task));
  }

  /** capChange for a change that records itself (a billing-period reset). */
  private changeOfCap<T>(key: string, task: () => Promise<T>): Promise<T> {
    return this.fence.around(key, () => this.change(task));
  }

  /** Waits for a record to be on disk; a disk that fails it makes the change a 507. */
  private async durable(written: Promise<void>, undone: string): Promise<void> {
    try {
      await written;
    } catch (error) {
      throw this.notSaved(error, undone);
    }
  }

  private notSaved(error: unknown, undone: string): StateWriteError {
    this.log.error(
      { event: 'state_write_failed', interface: this.ifname, error: messageOf(error) },
      `saving a change in the state directory failed: ${messageOf(error)}; ${undone}`,
    );
    return new StateWriteError(error, undone);
  }

  /**
   * Runs a change alone, and makes every later list read the kernel afresh: the freshness window
   * ends when the change ends, whether it succeeded or not (a failed change may have applied a
   * part). A loss the last list showed (a limit holding one way only, a cap no longer enforced)
   * is repaired first, whatever the change; a failed repair is logged and does not stop it.
   */
  private async change<T>(task: () => Promise<T>): Promise<T> {
    // The kernel layer's one change queue: one change at a time, in arrival order.
    await this.ready;
    return this.kernel.changes.run(async () => {
      try {
        if (this.damage.shaper || this.damage.quota) {
          try {
            const device = await this.readDevice();
            if (this.damage.shaper) await this.repair('shaper', device);
            if (this.damage.quota) await this.repair('quota', device);
          } catch (error) {
            this.log.warn(
              { event: 'kernel_repair_failed', interface: this.ifname, error: messageOf(error) },
              'repairing limits or caps before a change failed',
            );
          }
        }
        return await task();
      } finally {
        this.snapshots.invalidate();
      }
    });
  }

  private async readSnapshot(): Promise<PeerSnapshot> {
    const token = this.fence.token();
    const started = process.hrtime.bigint();
    const elapsed = (): number => Number(process.hrtime.bigint() - started) / 1e6;
    try {
      // The device first: its failure decides the answer (see allInOrder).
      const [device, limits, caps, suspended] = await allInOrder([
        this.call('wireguard', () => this.kernel.wireguard.getDevice(this.ifname)),
        this.optional('shaper', () => this.kernel.shaper.listLimits(this.ifname)),
        this.optional('quota', () => this.kernel.quota.listCaps(this.ifname)),
        this.optional('suspension', () => this.kernel.suspension.listSuspended(this.ifname)),
      ]);
      const readMs = elapsed();
      this.observer?.kernelRead(readMs, true);
      const read = { takenAt: this.now(), readMs, device, limits, caps, suspended };
      this.noticeLosses(read);
      this.schedulePlans(device, caps);
      const startedAt = read.takenAt - readMs;
      const exhausted = this.exhaustion?.read({
        caps,
        owners: this.capOwners(caps),
        startedAt,
        takenAt: read.takenAt,
      });
      // What the list and the metrics show: the kernel's caps, plus the caps of live peers that
      // the kernel lost behind the daemon's back, as last seen and not enforced.
      return {
        ...read,
        caps: this.listedCaps(caps),
        ...(exhausted ? { exhausted } : {}),
        usage: { caps, token, startedAt },
      };
    } catch (error) {
      this.observer?.kernelRead(elapsed(), false);
      throw error;
    }
  }

  /**
   * Hands the plans of a fresh read to the scheduler: each live peer's cap with a plan of its
   * own. Caps lost from the kernel keep their last seen plan (restored with it on a repair).
   */
  private schedulePlans(device: WireGuardDevice, caps: ReadonlyMap<string, KernelDataCap>): void {
    const plans = new Map<string, CapPlan>();
    for (const peer of device.peers) {
      const address = tunnelAddressOf(peer);
      const plan = address === null ? null : caps.get(address)?.plan;
      if (plan) plans.set(peer.publicKey, plan);
    }
    if (plans.size > 0 || this.periods.snapshot().size > 0) this.periods.replaceAll(plans);
  }

  /** A read of limits or caps on a kernel without that facility: there are none. */
  private async optional<K, V>(
    facility: Facility,
    read: () => Promise<Map<K, V>>,
  ): Promise<Map<K, V>> {
    try {
      return await this.call(facility, read);
    } catch (error) {
      if (isFacilityAbsent(error)) return new Map();
      throw error;
    }
  }

  private async call<T>(facility: Facility, operation: () => Promise<T>): Promise<T> {
    try {
      return await operation();
    } catch (error) {
      const translated = translateKernelError(error, facility, this.ifname);
      const code = translated instanceof DomainError ? translated.code : 'INTERNAL_ERROR';
      this.observer?.kernelError(facility, code);
      throw translated;
    }
  }

  private async findPeer(publicKey: string): Promise<WireGuardPeer> {
    const device = await this.call('wireguard', () => this.kernel.wireguard.getDevice(this.ifname));
    const peer = device.peers.find((p) => p.publicKey === publicKey);
    if (peer === undefined) throw new PeerNotFoundError();
    return peer;
  }

  /** The shaper's removeLimit of a peer: its IPv4 address, and its IPv6 one if it has one. */
  private removeLimitOf(ref: Pick<PeerRef, 'address' | 'address6'>): Promise<void> {
    const { shaper } = this.kernel;
    return ref.address6 == null
      ? shaper.removeLimit(this.ifname, ref.address)
      : shaper.removeLimit(this.ifname, ref.address, ref.address6);
  }

  /** The quota's removeCap of a peer, likewise. */
  private removeCapOf(ref: Pick<PeerRef, 'address' | 'address6'>): Promise<void> {
    const { quota } = this.kernel;
    return ref.address6 == null
      ? quota.removeCap(this.ifname, ref.address)
      : quota.removeCap(this.ifname, ref.address, ref.address6);
  }

  private async refFor(publicKey: string, what: string): Promise<PeerRef> {
    const peer = await this.findPeer(publicKey);
    const ip = tunnelAddressOf(peer);
    if (ip === null) throw new PeerWithoutAddressError(what);
    return refOf(peer, ip, this.dualStack);
  }

  /**
   * Removes the speed limits, data caps and suspensions the kernel holds for these addresses.
   * Only what is listed is removed, so a kernel without tc or nf_tables (or a facility not
   * built yet) costs nothing here.
   */
  private async removeLimitsAndCaps(
    refs: ReadonlyArray<Pick<PeerRef, 'address' | 'address6'>>,
  ): Promise<void> {
    if (refs.length === 0) return;
    const [limits, caps, suspended] = await allInOrder([
      this.optional('shaper', () => this.kernel.shaper.listLimits(this.ifname)),
      this.optional('quota', () => this.kernel.quota.listCaps(this.ifname)),
      this.optional('suspension', () => this.kernel.suspension.listSuspended(this.ifname)),
    ]);
    for (const ref of refs) {
      if (limits.has(ref.address)) {
        await this.call('shaper', () => this.removeLimitOf(ref));
      }
      if (caps.has(ref.address)) {
        await this.call('quota', () => this.removeCapOf(ref));
      }
      if (suspended.has(ref.address)) {
        await this.call('suspension', () =>
          this.kernel.suspension.resume(this.ifname, ref.address, ref.address6),
        );
      }
    }
  }

  private async readDevice(): Promise<WireGuardDevice> {
    const device = await this.call('wireguard', () => this.kernel.wireguard.getDevice(this.ifname));
    this.noticeDevice(device);
    return device;
  }

  /**
   * An interface recreated under the daemon (same name, new ifindex) took its peers and its tc
   * state with it, while the IFB and the nft table stayed: both are reconciled with the new
   * peers on the next write, so nothing of the old peers reaches a new one.
   */
  private noticeDevice(device: WireGuardDevice): void {
    if (this.lastIfindex !== undefined && device.ifindex !== this.lastIfindex) {
      this.damage = { shaper: true, quota: true };
      this.log.warn(
        {
          event: 'interface_recreated',
          interface: this.ifname,
          ifindex: device.ifindex,
          previousIfindex: this.lastIfindex,
        },
        'the interface was recreated behind wg-peerd; limits and caps are reconciled with its peers on the next write',
      );
    }
    this.lastIfindex = device.ifindex;
  }

  private refIn(device: WireGuardDevice, publicKey: string, what: string): PeerRef {
    const peer = device.peers.find((p) => p.publicKey === publicKey);
    if (peer === undefined) throw new PeerNotFoundError();
    const ip = tunnelAddressOf(peer);
    if (ip === null) throw new PeerWithoutAddressError(what);
    return refOf(peer, ip, this.dualStack);
  }

  /**
   * Sets up or repairs one facility against the live peers of `device` and logs at warn what
   * it found and did; the kernel layer decides, the service only passes the peers in (and, for
   * caps, what it last saw).
   */
  private async repair(
    facility: 'shaper' | 'quota' | 'suspension',
    device: WireGuardDevice,
  ): Promise<void> {
    const live: PeerRef[] = [];
    for (const peer of device.peers) {
      const address = tunnelAddressOf(peer);
      if (address !== null) live.push(refOf(peer, address, this.dualStack));
    }
    let repairs: Repair[];
    if (facility === 'shaper') {
      repairs = await this.call('shaper', () => this.kernel.shaper.ensure(this.ifname, live));
    } else if (facility === 'suspension') {
      repairs = await this.call('suspension', () =>
        this.kernel.suspension.ensure(this.ifname, live),
      );
    } else {
      const withCaps: CapRef[] = live.map((peer) => {
        const seen = this.lastCaps.get(peer.address);
        return seen?.publicKey === peer.publicKey ? { ...peer, lastSeen: seen.cap } : peer;
      });
      repairs = await this.call('quota', () => this.kernel.quota.ensure(this.ifname, withCaps));
    }
    if (facility !== 'suspension') this.damage[facility] = false;
    for (const repair of repairs) {
      this.log.warn(
        { event: 'kernel_repaired', interface: this.ifname, facility, ...repair },
        `repaired ${REPAIRED[facility]}: ${repair.found}: ${repair.done}`,
      );
    }
  }

  /** The owner of each cap of a read (what noticeLosses just remembered): address → key. */
  private capOwners(caps: ReadonlyMap<string, KernelDataCap>): Map<string, string> {
    const owners = new Map<string, string>();
    for (const address of caps.keys()) {
      const owner = this.lastCaps.get(address)?.publicKey;
      if (owner !== undefined) owners.set(address, owner);
    }
    return owners;
  }

  /**
   * The kernel's caps, and for a live peer whose cap the kernel lost, the one last seen (not
   * enforced). noticeLosses has already dropped what it remembered of peers that are gone.
   */
  private listedCaps(kernelCaps: ReadonlyMap<string, KernelDataCap>): Map<string, KernelDataCap> {
    const listed = new Map(kernelCaps);
    for (const [address, seen] of this.lastCaps) {
      if (!listed.has(address)) listed.set(address, { ...seen.cap, enforced: false });
    }
    return listed;
  }

  /**
   * Remembers the caps of a fresh snapshot and notices what was lost behind the daemon's back
   * (logged at warn once per distinct loss; repaired on the next write).
   */
  private noticeLosses(snapshot: PeerSnapshot): void {
    this.noticeDevice(snapshot.device);
    // Nothing to check on a device without limits or caps, now or last read: no walk over its
    // peers (a Map of 50,000 addresses per poll was measurable on a big idle server).
    if (
      snapshot.limits.size === 0 &&
      snapshot.caps.size === 0 &&
      this.lastCaps.size === 0 &&
      this.lastLosses === ''
    ) {
      return;
    }
    const live = new Map<string, string>(); // address → public key
    for (const peer of snapshot.device.peers) {
      const address = tunnelAddressOf(peer);
      if (address !== null) live.set(address, peer.publicKey);
    }
    const limits: string[] = [];
    const caps: string[] = [];
    for (const [address, state] of snapshot.limits) {
      const { holds } = limitOf(state);
      if (!live.has(address)) limits.push(`speed limit for ${address}, which no peer has`);
      else if (holds === 'download' || holds === 'upload') {
        limits.push(`speed limit of ${address} holds for ${holds} only`);
      }
    }
    for (const [address, cap] of snapshot.caps) {
      if (!live.has(address)) caps.push(`data cap for ${address}, which no peer has`);
      else if (!cap.enforced) caps.push(`data cap of ${address} is not enforced`);
    }
    for (const [address, seen] of [...this.lastCaps]) {
      if (live.get(address) !== seen.publicKey) this.lastCaps.delete(address);
      else if (!snapshot.caps.has(address)) {
        caps.push(`data cap of ${address} (${seen.cap.quotaBytes} bytes) is gone from the kernel`);
      }
    }
    for (const [address, cap] of snapshot.caps) {
      const publicKey = live.get(address);
      if (publicKey !== undefined) {
        this.lastCaps.set(address, { publicKey, cap: capToKeep(cap) });
      }
    }
    this.damage = {
      shaper: this.damage.shaper || limits.length > 0,
      quota: this.damage.quota || caps.length > 0,
    };
    const losses = [...limits, ...caps];
    const text = losses.join('; ');
    if (text !== '' && text !== this.lastLosses) {
      this.log.warn(
        { event: 'kernel_state_lost', interface: this.ifname, found: losses },
        `limits or caps changed behind wg-peerd's back (${text}); the next write repairs them`,
      );
    }
    this.lastLosses = text;
  }

  private async serverHost(): Promise<string> {
    if (this.endpointHost !== null) return this.endpointHost;
    const primary = await this.call('link', () => this.kernel.link.primaryIpv4());
    if (primary === null) throw new EndpointUnknownError();
    return primary;
  }
}
